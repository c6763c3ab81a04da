#!/usr/bin/env python3
"""Quantization error of `cachet quantize` against `llama-quantize`, tensor by tensor, on the tensors both
files store in the given type: plain, |x|- and x^2-weighted squared error against the source's values
(gguf-py's decoders read all three files). Both run with --pure, so every weight matrix takes the type where
its rows allow (docs/quantize.md, the 2026-11-27 run (ae42aa0)).

  bench/quantizer_error.py -m SRC.gguf --type Q4_K --llama-quantize ~/.cache/cachet/llama.cpp/native/build/bin/llama-quantize
"""
import argparse
import pathlib
import subprocess
import tempfile

import gguf
import numpy as np
from gguf.quants import dequantize

ROOT = pathlib.Path(__file__).resolve().parent.parent


def tensors(path):
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def values(t):
    return dequantize(t.data, t.tensor_type).astype(np.float64).ravel()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True, help="source GGUF (F16/BF16/F32, or quantized: requantized)")
    ap.add_argument("--type", required=True, help="Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, ...")
    ap.add_argument("--llama-quantize", required=True)
    ap.add_argument("--cachet", default=str(ROOT / "build" / "cachet"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = pathlib.Path(tmp) / "ours.gguf", pathlib.Path(tmp) / "theirs.gguf"
        subprocess.run([a.cachet, "quantize", "-m", a.model, "-o", str(ours), "--type", a.type, "--pure",
                        "--allow-requantize"], check=True, capture_output=True)
        subprocess.run([a.llama_quantize, "--pure", "--allow-requantize", a.model, str(theirs), a.type],
                       check=True, capture_output=True)
        src, A, B = tensors(a.model), tensors(ours), tensors(theirs)
        sums = np.zeros((3, 2))
        n = 0
        for name, t in A.items():
            if t.tensor_type.name != a.type or B[name].tensor_type.name != a.type:
                continue
            x = values(src[name])
            n += 1
            for j, y in enumerate((values(t), values(B[name]))):
                e = (y - x) ** 2
                sums[:, j] += [e.sum(), (np.abs(x) * e).sum(), (x * x * e).sum()]
    print(f"{a.type}: {n} tensors")
    for k, label in enumerate(["plain", "|x|-weighted", "x^2-weighted"]):
        print(f"  {label:13s} rms error, cachet / llama.cpp: {np.sqrt(sums[k, 0] / sums[k, 1]):.4f}")


if __name__ == "__main__":
    main()
