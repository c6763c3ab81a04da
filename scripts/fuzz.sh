#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, in build-asan: the same build as the sanitized tests) and
# runs each for SECONDS (default 60), from the seed corpora in fuzz/corpus (plus the chat templates of
# tests/data for the Jinja target) into a working corpus under build-asan/fuzz-work/. A finding (crash, leak,
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
[ ${#targets[@]} -gt 0 ] || targets=(gguf llama2c tokenizer jinja request stop)

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCACHET_FUZZ=ON -DCACHET_BUILD_BENCH=OFF -DCACHET_PYTHON=/nonexistent >/dev/null
cmake --build build-asan --target $(printf 'fuzz_%s ' "${targets[@]}")

vocabs="$(ls "$root"/../shared/vocab/*.gguf | tr '\n' ':')"
declare -A max_len=([gguf]=65536 [llama2c]=8192 [tokenizer]=1024 [jinja]=4096 [request]=4096 [stop]=256)
status=0
for t in "${targets[@]}"; do
  work="build-asan/fuzz-work/$t"
  mkdir -p "$work/corpus" "$work/artifacts"
  seeds=("fuzz/corpus/$t")
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
