#!/usr/bin/env bash
# Builds llama.cpp's own tools (llama-bench, llama-server, llama-perplexity, llama-speculative, llama-mtmd-cli)
# from the source tree inside the PyPI sdist of llama-cpp-python, with clang, into ~/.cache/cachet/llama.cpp/VARIANT/bin.
# The peer for the side-by-side benches; not needed by the tests. Nothing of it is committed.
#
#   bash scripts/setup_llamacpp.sh            # native: -DGGML_NATIVE=ON, its best build on this CPU
#   bash scripts/setup_llamacpp.sh avx2       # what llama.cpp builds for an AVX2 + FMA + F16C CPU (no AVX-512),
#                                             # to compare the AVX2 tables on a machine that also has AVX-512
#   bash scripts/setup_llamacpp.sh avxvnni    # AVX2 + AVX-VNNI, no AVX-512: Intel's client cores since Alder Lake
set -euo pipefail
variant="${1:-native}"
version=0.3.36
cache="${CACHET_CACHE:-$HOME/.cache/cachet}/llama.cpp"
src="$cache/src-$version"
out="$cache/$variant"
mkdir -p "$cache"

if [ ! -d "$src/vendor/llama.cpp" ]; then
  tmp="$(mktemp -d)"
  pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$tmp"
  mkdir -p "$src"
  tar -xzf "$tmp"/llama_cpp_python-"$version".tar.gz -C "$src" --strip-components=1
  rm -rf "$tmp"
fi

case "$variant" in
  native) flags=(-DGGML_NATIVE=ON) ;;
  avx2|avxvnni)
    vnni=$([ "$variant" = avxvnni ] && echo ON || echo OFF)
    flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
           -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI="$vnni") ;;
  *) echo "setup_llamacpp: unknown variant $variant (native|avx2|avxvnni)" >&2; exit 2 ;;
esac

if [ ! -x "$out/bin/llama-bench" ] || [ ! -x "$out/bin/llama-mtmd-cli" ]; then
  cmake -S "$src/vendor/llama.cpp" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF "${flags[@]}" >/dev/null
  cmake --build "$out/build" --target llama-bench llama-server llama-perplexity llama-speculative llama-cli \
    llama-mtmd-cli
  mkdir -p "$out/bin"
  cp "$out/build/bin/"llama-{bench,server,perplexity,speculative,cli,mtmd-cli} "$out/bin/"
fi
"$out/bin/llama-bench" --help >/dev/null
echo "llama.cpp ($variant): $out/bin"
