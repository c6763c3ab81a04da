#!/usr/bin/env bash
# Sets up what building and running cachet need on a fresh Debian machine: a compiler, CMake, Ninja and a few
# libraries, the default model (fetched once into a cache outside the repo, through a small Python venv), and a
# release build of the CLI and the library. What the tests use comes with scripts/setup_tests.sh (test.sh runs it).
# Idempotent: a second run only checks and rebuilds what changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

apt_pkgs=(cmake ninja-build clang ccache nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev python3-venv
          libjpeg62-turbo-dev libpng-dev libwebp-dev  # image decoding (vision models)
          libopenblas-dev)  # the vision encoders' f32 GEMMs
bash scripts/apt_install.sh "${apt_pkgs[@]}"

bash scripts/setup_xgrammar.sh  # constrained decoding's grammar engine, into the cache

venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
model="$("$venv/bin/python" scripts/fetch_model.py)"
echo "setup: default model at $model"

# ccache: the Python package's build (pip install .) and later rebuilds reuse these objects, from any checkout
# (paths under the checkout are hashed relative to it).
export CCACHE_BASEDIR="$root"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build build
