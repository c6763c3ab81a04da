#!/usr/bin/env bash
# Every kernel table at work, two ways (CTest runs both):
#   native: each table this CPU can run (CACHET_ISA) but the default one (the main suite runs that) runs the
#           model and engine tests (the kernel tests already compare every table with the scalar one in one
#           process);
#   qemu:   the levels below this machine's, under Debian's qemu-user: the binaries must start (nothing above
#           the emulated CPU's level may run before dispatch), choose the table that level allows, pass the
#           kernel tests, and give the native greedy token ids on stories260K (a short greedy run on a real
#           model lands on the same ids within the cross-ISA tolerance; docs/numerics.md).
#   scripts/test_isa_levels.sh native|qemu BUILD_DIR [SHARED_DIR]
set -euo pipefail
mode="$1"
build="$2"
shared="${3:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared}"
cachet="$build/cachet"
tests="$build/tests/cachet_tests"
model="$shared/models/stories260K.bin"
if [ "$mode" = native ]; then
  # The table chosen by default already runs every test in the main suite: here, only the others.
  tables="$("$cachet" info --cpu --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(" ".join(t for t in j["tables"] if t != j["table"]))')"
  for isa in $tables; do
    # The 30-layer cached-vs-recompute test is the slow one; it runs on the best table in the main suite.
    if ! out="$(CACHET_ISA="$isa" "$tests" --gtest_brief=1 \
                --gtest_filter='Model.*:Engine.*:HybridEngine.*:Attention.*:BeamSearch.*:-Model.CachedDecodeEqualsNoCacheRecompute' 2>&1)"; then
      echo "$out" >&2
      echo "CACHET_ISA=$isa: model/engine tests failed" >&2
      exit 1
    fi
    echo "CACHET_ISA=$isa: $(echo "$out" | grep -E '^\[  PASSED' || echo "$out" | tail -n 1)"
  done
  exit 0
fi
[ "$mode" = qemu ] || { echo "usage: $0 native|qemu BUILD_DIR [SHARED_DIR]" >&2; exit 2; }
command -v qemu-x86_64 >/dev/null || { echo "qemu-x86_64 not found (scripts/setup.sh installs qemu-user)" >&2; exit 1; }
[ -f "$model" ] || { echo "missing $model" >&2; exit 1; }

# Greedy token ids: stories260K (llama2.c, f32 weights: the float kernels) and, when setup has fetched it, the
# default model (Q4_1: the packed integer path, its tokenizer and attention over a real prompt).
default_model="${CACHET_MODEL:-$HOME/.cache/cachet/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
ids() {
  { "$@" run -m "$model" --prompt-ids "1" -n 64 --temp 0 --format json 2>/dev/null
    if [ -f "$default_model" ]; then
      "$@" run -m "$default_model" -p "The capital of France is" -n 12 --temp 0 --format json 2>/dev/null
    fi; } | python3 -c 'import json,sys; print(" | ".join(" ".join(map(str, json.loads(l)["token_ids"])) for l in sys.stdin))'
}
native="$(ids "$cachet")"
[ -n "$native" ] || { echo "native run gave no ids" >&2; exit 1; }

# Haswell: AVX2 + FMA + F16C, no AVX-512, no AVX-VNNI. Nehalem: SSE4.2, so the scalar table.
for level in Haswell:avx2 Nehalem:scalar; do
  cpu="${level%%:*}" want="${level##*:}"
  q=(qemu-x86_64 -cpu "$cpu")
  got="$("${q[@]}" "$cachet" info --cpu --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["table"])')"
  [ "$got" = "$want" ] || { echo "$cpu: chose table '$got', want '$want'" >&2; exit 1; }
  if ! out="$("${q[@]}" "$tests" --gtest_brief=1 --gtest_filter='Kernels.*:PackedKernels.*:Quantize.*:Fp16*' 2>&1)"; then
    echo "$out" | grep -v "TCG doesn't support" >&2
    echo "$cpu: kernel tests failed" >&2
    exit 1
  fi
  echo "$out" | grep -E '^\[  (PASSED|FAILED)' || true
  emulated="$(ids "${q[@]}" "$cachet")"
  if [ "$emulated" != "$native" ]; then
    echo "$cpu: greedy ids differ from native" >&2
    echo "  native:   $native" >&2
    echo "  emulated: $emulated" >&2
    exit 1
  fi
  echo "$cpu ($want table): kernel tests pass, greedy ids == native (${native:0:40}...)"
done
