#!/usr/bin/env python3
"""Encoder speed: `cachet tokenize --time` (encode only, timed inside the binary) against HF `tokenizers` built
from the same vocabulary, on 1 MB and 4 MB of English-like text and 100 KB without spaces; best of --reps.
The tests count this work instead (tests/python/test_tokenizer.py); this script times it.

    .venv/bin/python bench/tokenizer_speed.py [-m MODEL.gguf] [--reps 5]
"""
import argparse
import pathlib
import random
import subprocess
import sys
import tempfile
import time

root = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root / "tests" / "python"))
from test_tokenizer import english_text, smollm2_hf_tokenizer  # noqa: E402


def cachet_seconds(binary, model, path, reps):
    best = float("inf")
    for _ in range(reps):
        r = subprocess.run([binary, "tokenize", "-m", model, "--no-add-special", "--time", "-f", str(path)],
                           check=True, capture_output=True, text=True)
        best = min(best, float(r.stderr.split("encode_seconds=")[1].split()[0]))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--bin", default=str(root / "build" / "cachet"))
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    model = a.model or subprocess.run([sys.executable, str(root / "scripts" / "fetch_model.py")], check=True,
                                      capture_output=True, text=True).stdout.strip()
    texts = {"1 MB": english_text(1 << 20), "4 MB": english_text(4 << 20, seed=8),
             "100 KB, no spaces": "".join(random.Random(3).choice("abcdefghijklmnopqrstuvwxyz")
                                          for _ in range(100_000))}
    hf = None
    try:
        hf = smollm2_hf_tokenizer(model)
    except Exception:  # HF tokenizers is an oracle of the tests; the cachet figures stand alone without it
        pass
    with tempfile.TemporaryDirectory() as d:
        for name, text in texts.items():
            p = pathlib.Path(d) / "t.txt"
            p.write_text(text)
            mb = len(text.encode()) / 1e6
            ours = cachet_seconds(a.bin, model, p, a.reps)
            line = f"{name}: cachet {ours:.3f} s ({mb / ours:.1f} MB/s)"
            if hf is not None:
                t0 = time.perf_counter()
                hf.encode(text, add_special_tokens=False)
                theirs = time.perf_counter() - t0
                line += f", HF tokenizers {theirs:.3f} s ({mb / theirs:.1f} MB/s)"
            print(line)


if __name__ == "__main__":
    main()
