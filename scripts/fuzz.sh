#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, in build-asan: the same build as the sanitized tests) and
# runs each for SECONDS (default 60), from the seed corpora in fuzz/corpus (plus the chat templates of
# tests/data for the Jinja target, and generated model files for the GGUF and llama2.c targets) into a working corpus under build-asan/fuzz-work/. A finding (crash, leak,
# timeout, out-of-memory) stops that target, leaves its input in build-asan/fuzz-work/<target>/artifacts and makes
# the script fail. Prints each target's executions and coverage.
#
#   bash scripts/fuzz.sh            # 60 s each
#   bash scripts/fuzz.sh 3600 jinja # one target for an hour
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
secs="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf llama2c tokenizer jinja request stop image)

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCACHET_FUZZ=ON -DCACHET_BUILD_BENCH=OFF -DCACHET_PYTHON=/nonexistent >/dev/null
cmake --build build-asan --target cachet $(printf 'fuzz_%s ' "${targets[@]}")

# Model-file seeds are generated, not committed (no model files in the repo): tiny synthetic GGUFs of two
# architectures and two llama2.c checkpoints (shared and separate head, GQA).
gen="build-asan/fuzz-work/seeds"
if [ ! -f "$gen/llama2c/tiny-gqa-unshared.bin" ]; then
  mkdir -p "$gen/gguf" "$gen/llama2c"
  tiny=(--preset tiny --n-vocab 64 --n-embd 32 --n-head 1 --n-head-kv 1 --n-ff 32 --n-ctx 64)
  build-asan/cachet synth "${tiny[@]}" --n-layer 1 --type F32 -o "$gen/gguf/tiny-llama-f32.gguf" >/dev/null
  build-asan/cachet synth "${tiny[@]}" --n-layer 2 --arch gemma3 --type Q8_0 -o "$gen/gguf/tiny-gemma3-q8.gguf" >/dev/null
  python3 - "$gen/llama2c" <<'PY'
import random, struct, sys
random.seed(1)
def write(path, dim, hidden, L, heads, kv, vocab, seq):
    hs = dim // heads
    v = abs(vocab)
    n = v * dim + L * dim + L * dim * heads * hs + 2 * L * dim * kv * hs + L * heads * hs * dim + L * dim
    n += 3 * L * hidden * dim + dim + seq * hs + (v * dim if vocab < 0 else 0)
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", dim, hidden, L, heads, kv, vocab, seq))
        f.write(struct.pack("<%df" % n, *[random.uniform(-0.1, 0.1) for _ in range(n)]))
write(sys.argv[1] + "/tiny-shared.bin", 8, 16, 1, 2, 2, 16, 8)
write(sys.argv[1] + "/tiny-gqa-unshared.bin", 8, 8, 2, 2, 1, -12, 4)
PY
fi

vocabs="$(ls "$root"/../shared/vocab/*.gguf | tr '\n' ':')"
declare -A max_len=([gguf]=65536 [llama2c]=8192 [tokenizer]=1024 [jinja]=4096 [request]=4096 [stop]=256 [image]=16384)
status=0
for t in "${targets[@]}"; do
  work="build-asan/fuzz-work/$t"
  mkdir -p "$work/corpus" "$work/artifacts"
  seeds=()
  [ -d "fuzz/corpus/$t" ] && seeds+=("fuzz/corpus/$t")
  [ -d "$gen/$t" ] && seeds+=("$gen/$t")
  [ "$t" = jinja ] && seeds+=("tests/data/chat_templates")
  log="$work/last.log"
  if CACHET_FUZZ_VOCABS="$vocabs" ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "build-asan/fuzz/fuzz_$t" -max_total_time="$secs" -max_len="${max_len[$t]}" -rss_limit_mb=2048 -timeout=20 \
      -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus" "${seeds[@]}" >"$log" 2>&1; then
    result=ok
  else
    result=FINDING
    status=1
  fi
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')"
  cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')"
  ft="$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')"
  echo "fuzz_$t: $result, ${secs} s, $execs executions, coverage $cov edges ($ft features), corpus $(ls "$work/corpus" | wc -l) inputs"
  [ "$result" = ok ] || tail -40 "$log"
done
exit $status
