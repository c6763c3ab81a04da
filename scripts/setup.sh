#!/usr/bin/env bash
# Sets up everything cachet needs on a fresh Debian machine: system packages, a Python venv for the test
# oracles, the default model (fetched once into a cache outside the repo), and a release build.
# Idempotent: a second run only checks and rebuilds what changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

apt_pkgs=(cmake ninja-build clang g++ libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
          libcli11-dev libpcre2-dev libcpp-httplib-dev libomp-dev python3-venv gnuplot-nox qemu-user
          chromium chromium-driver libclang-rt-14-dev  # libclang-rt: libFuzzer (scripts/fuzz.sh)
          libopenmpi-dev openmpi-bin iproute2         # --tp: MPI (src/dist/); test hosts in netns
          libmpich-dev mpich)                         # cachet-mpich: the second MPI the tests run
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if [ ! -f "$venv/.stamp" ] || [ requirements.txt -nt "$venv/.stamp" ]; then
  "$venv/bin/pip" install -q --disable-pip-version-check -r requirements.txt
  touch "$venv/.stamp"
fi

model="$("$venv/bin/python" scripts/fetch_model.py)"
echo "setup: default model at $model"

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build
