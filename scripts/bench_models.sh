#!/usr/bin/env bash
# Writes the synthetic benchmark files of issue #7 into ${1:-/tmp/cachet-bench}: SmolLM2-135M-shaped and
# Llama-3.2-1B-shaped, in F16, Q8_0, Q4_0, Q4_1 (written directly by `cachet synth`) and Q4_K_M (`cachet
# quantize` of the F16 file, llama.cpp's mix). Random weights with a fixed seed; ~7 GB in all.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-/tmp/cachet-bench}"
mkdir -p "$out"
c="$root/build/cachet"
for preset in smollm2-135m llama-3.2-1b; do
  for t in F16 Q8_0 Q4_0 Q4_1; do
    f="$out/$preset-$t.gguf"
    [ -f "$f" ] || "$c" synth --preset "$preset" --type "$t" -o "$f" >/dev/null
  done
  f="$out/$preset-Q4_K_M.gguf"
  [ -f "$f" ] || "$c" quantize -m "$out/$preset-F16.gguf" -o "$f" --type Q4_K_M
done
# Issue #15's architectures: Qwen3-0.6B-, Gemma-3-1B- and small-Qwen3-MoE-shaped (16 experts, 4 active),
# Q4_K_M (`cachet quantize` of the F16 file) and Q8_0.
for preset in qwen3-0.6b gemma-3-1b qwen3-moe-small; do
  f16="$out/$preset-F16.gguf"
  [ -f "$f16" ] || "$c" synth --preset "$preset" --type F16 -o "$f16" >/dev/null
  f="$out/$preset-Q4_K_M.gguf"
  [ -f "$f" ] || "$c" quantize -m "$f16" -o "$f" --type Q4_K_M
  f="$out/$preset-Q8_0.gguf"
  [ -f "$f" ] || "$c" synth --preset "$preset" --type Q8_0 -o "$f" >/dev/null
done
ls -la "$out"
