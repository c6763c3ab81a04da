#!/usr/bin/env bash
# The whole test suite: unit and model tests (GoogleTest), the Python oracles (pytest against the real
# binary), the installed library and the Python package, and the file loaders again under AddressSanitizer +
# UndefinedBehaviorSanitizer. Installs what the tests use first (scripts/setup_tests.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
jobs="$(nproc)"
export CCACHE_BASEDIR="$root"  # ccache: objects shared with setup.sh's build and the Python package's
bash scripts/setup_tests.sh

# The same configuration as scripts/setup.sh's, now with the tests and benches, configured afresh so that what
# setup_tests.sh installed (GoogleTest, MPI) is found; unchanged objects are not rebuilt.
cmake --fresh -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCACHET_BUILD_TESTS=ON -DCACHET_BUILD_BENCH=ON >/dev/null
cmake --build build
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== loaders and parsers under ASan + UBSan =="
# The sanitized build also carries libFuzzer's coverage instrumentation (CACHET_FUZZ), so the fuzz targets
# come from the same objects.
# -O1 and line tables only: what sanitizer builds usually use; ~20% less compile time than -O2 -g, same reports.
# Only the kernel tables this machine runs are built (the others cannot run here; each ISA file is minutes of
# compile under the sanitizers): the ones `cachet info --cpu` lists.
tables="$(build/cachet info --cpu | sed -n 's/^tables: //p' | tr ' ' '\n' | grep -vx scalar | paste -sd ';' || true)"
case ";$tables;" in *";avx2;"*) ;; *) tables="avx2" ;; esac
echo "kernel tables in the sanitized build: $tables"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache "-DCACHET_KERNEL_TABLES=$tables" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DCACHET_FUZZ=ON -DCACHET_BUILD_BENCH=OFF -DCACHET_PYTHON=/nonexistent >/dev/null
cmake --build build-asan --target cachet_tests cachet
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -R 'Gguf|Llama2c|Kernels|Model|Architectures|Moe|Radix|Scheduler|Jinja|KvCacheManager|BlockPool|Engine|Tokenizer|VocabFiles|BeamSearch|Attention|Image|Resize|Vision|DataUri'

echo "== fuzz targets, ${CACHET_FUZZ_SECONDS:-20} s each =="
bash scripts/fuzz.sh "${CACHET_FUZZ_SECONDS:-20}"
