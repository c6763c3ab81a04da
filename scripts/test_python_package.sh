#!/usr/bin/env bash
# The Python package as a user installs it: a fresh venv, `pip install .` (scikit-build-core builds the engine
# and its nanobind module; ccache, when present, reuses the main build's objects), then tests/package/ against
# the CLI in BUILD_DIR. Usage: scripts/test_python_package.sh BUILD_DIR
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "$1" && pwd)"
venv="$build/package-venv"
python3 -m venv --clear "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check pytest
export CCACHE_BASEDIR="$root"
cmake_args=""
command -v ccache >/dev/null && cmake_args="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  "$venv/bin/pip" install -q --disable-pip-version-check "$root"
model="$("$root/.venv/bin/python" "$root/scripts/fetch_model.py" | tail -1)"
cd "$build"  # not the source tree: `import cachet` must find the installed package, not python/cachet
CACHET_BIN="$build/cachet" CACHET_MODEL="$model" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/tests/package"
