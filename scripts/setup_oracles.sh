#!/usr/bin/env bash
# Test-only oracles that come with llama.cpp's source: the PyPI sdist of llama-cpp-python, unpacked once into
# ~/.cache/cachet/llama.cpp/src-VERSION (its vendor/llama.cpp/models/ vocab test files are read from there, never
# committed), and llama.cpp's Python binding built from the same sdist (the wheel is kept, so a second venv on
# this machine installs in seconds). Portable flags
# (GGML_NATIVE=OFF): a correctness oracle for the architecture tests, not the speed peer (scripts/setup_llamacpp.sh);
# with its multimodal library (libmtmd, the oracle for the vision encoders). The wheel is built once into
# ~/.cache/cachet/llama.cpp/wheel-VERSION: pip's own wheel cache does not key on CMAKE_ARGS, so it could hand back
# an earlier build without libmtmd.
# Idempotent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
version=0.3.36
cache="${CACHET_CACHE:-$HOME/.cache/cachet}/llama.cpp"
src="$cache/src-$version"
sdist="$cache/llama_cpp_python-$version.tar.gz"
mkdir -p "$cache"
if [ ! -f "$sdist" ]; then
  tmp="$(mktemp -d)"
  "$venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$version" -d "$tmp"
  mv "$tmp/llama_cpp_python-$version.tar.gz" "$sdist"
  rm -rf "$tmp"
fi
if [ ! -f "$src/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf.inp" ]; then
  mkdir -p "$src"
  tar -xzf "$sdist" -C "$src" --strip-components=1
fi
lib="$("$venv/bin/python" -c 'import llama_cpp, os; print(os.path.dirname(llama_cpp.__file__))' 2>/dev/null || true)"
if [ -n "$lib" ] && [ -f "$lib/lib/libmtmd.so" ] &&
   "$venv/bin/python" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$version')" 2>/dev/null; then
  exit 0
fi
wheels="$cache/wheel-$version"
if ! ls "$wheels"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
  echo "setup_oracles: building llama-cpp-python $version with libmtmd (a few minutes, once)"
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$venv/bin/pip" wheel -q --disable-pip-version-check --no-cache-dir --no-deps --no-binary llama-cpp-python \
    -w "$wheels" "$sdist"
fi
whl="$(ls "$wheels"/llama_cpp_python-"$version"-*.whl | head -1)"
# Replace any build of the same version (without libmtmd), then add its dependencies (diskcache, ...).
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$whl"
"$venv/bin/pip" install -q --disable-pip-version-check "$whl"
