#!/usr/bin/env bash
# Installs llama.cpp (PyPI llama-cpp-python, built from source for this CPU, with clang: GCC 12 miscompiles
# its AMX path) into the project venv, for the side-by-side benches. Not needed by the tests.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >/dev/null
if ! .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
  CC=clang CXX=clang++ CMAKE_ARGS="-DGGML_NATIVE=ON" \
    .venv/bin/pip install -q --no-binary llama-cpp-python -r requirements-bench.txt
fi
# Plots of the bench scripts (bench/long_context.py).
.venv/bin/python -c "import matplotlib" 2>/dev/null || .venv/bin/pip install -q --disable-pip-version-check "matplotlib>=3.7"
.venv/bin/python -c "import llama_cpp; print('llama.cpp:', llama_cpp.__version__, llama_cpp.llama_print_system_info().decode())"
