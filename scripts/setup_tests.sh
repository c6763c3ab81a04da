#!/usr/bin/env bash
# What the tests use, beyond scripts/setup.sh: GoogleTest and Google Benchmark, qemu-user (the lower ISA levels),
# chromium (the pages), Open MPI and MPICH (tensor parallelism), valgrind (counted work), libFuzzer's runtime,
# gnuplot, the Python oracles (requirements.txt) and llama.cpp's binding (scripts/setup_oracles.sh). Idempotent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

apt_pkgs=(libgtest-dev libgmock-dev libbenchmark-dev gnuplot-nox qemu-user valgrind json-schema-test-suite
          chromium chromium-driver libclang-rt-14-dev  # libclang-rt: libFuzzer (scripts/fuzz.sh)
          libopenmpi-dev openmpi-bin iproute2         # --tp: MPI (src/distributed/); test hosts in netns
          libmpich-dev mpich)                         # cachet-mpich: the second MPI the tests run
bash scripts/apt_install.sh "${apt_pkgs[@]}"

venv="$root/.venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if [ ! -f "$venv/.stamp" ] || [ requirements.txt -nt "$venv/.stamp" ]; then
  "$venv/bin/pip" install -q --disable-pip-version-check -r requirements.txt
  touch "$venv/.stamp"
fi
bash scripts/setup_oracles.sh  # llama.cpp's Python binding, for the architecture oracles
