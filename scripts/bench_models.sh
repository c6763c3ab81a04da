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
ls -la "$out"
