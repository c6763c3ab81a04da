"""Encoder time for one image and its memory: `cachet encode-image` side by side with llama.cpp's
llama-mtmd-cli (its "batch encoding done in N ms"), same projector file, image and threads, engines alternating,
medians of --reps runs. The default files are synthetic, shaped like Gemma 3's projector (SigLIP 27 x 1152,
896 px, F16) and a one-layer 2560-wide Gemma 3 for mtmd-cli to attach it to; they are written to the cache once.
Prints one JSON line, with the FLOPs per image and what they come to per second.

  python3 bench/vision_encoder.py --mtmd-cli ~/.cache/cachet/llama.cpp/native/bin/llama-mtmd-cli [--reps 3]
"""
import argparse
import json
import os
import re
import statistics
import subprocess

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "cachet", "bench-models")


def synth(cachet, path, args):
    if not os.path.exists(path):
        subprocess.run([cachet, "synth", "-o", path, *args], check=True, stdout=subprocess.DEVNULL)
    return path


def peak_rss_kb(stderr):
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    return int(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cachet", default=os.path.join(ROOT, "build", "cachet"))
    ap.add_argument("--mtmd-cli", default=None)
    ap.add_argument("--mmproj", default=None, help="a projector file (default: the synthetic Gemma 3 shape)")
    ap.add_argument("--model", default=None, help="its language model, for mtmd-cli")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(CACHE, exist_ok=True)
    mm = a.mmproj or synth(a.cachet, os.path.join(CACHE, "mmproj-gemma3-shape-f16.gguf"),
                           ["--arch", "mmproj-gemma3", "--type", "F16", "--n-embd", "1152", "--n-ff", "4304",
                            "--n-layer", "27", "--n-head", "16", "--image-size", "896", "--patch-size", "14",
                            "--merge", "4", "--proj-dim", "2560"])
    lm = a.model or synth(a.cachet, os.path.join(CACHE, "gemma3-2560-1l.gguf"),
                          ["--arch", "gemma3", "--type", "F16", "--n-embd", "2560", "--n-layer", "1", "--n-head", "8",
                           "--n-head-kv", "4", "--head-dim", "256", "--n-ff", "512"])
    img = os.path.join(CACHE, "bench-photo-768x1024.jpg")
    if not os.path.exists(img):
        y, x = np.mgrid[0:1024, 0:768]
        base = np.stack([np.sin(x / 37 + c) * np.cos(y / 23 - c) for c in range(3)], -1) * 100 + 128
        noise = np.random.default_rng(0).normal(0, 20, base.shape)
        Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8)).save(img, quality=90)
    ours, theirs, info = [], [], {}
    for _ in range(a.reps):
        r = subprocess.run(["/usr/bin/time", "-v", a.cachet, "encode-image", "--mmproj", mm, "--image", img, "-t",
                            str(a.threads)], check=True, capture_output=True, text=True)
        info = json.loads(r.stdout)
        ours.append((info["encode_ms"], peak_rss_kb(r.stderr)))
        if a.mtmd_cli:
            r = subprocess.run(["/usr/bin/time", "-v", a.mtmd_cli, "-m", lm, "--mmproj", mm, "--image", img, "-p",
                                "describe", "-n", "1", "-t", str(a.threads), "--temp", "0", "--chat-template",
                                "gemma"], check=True, capture_output=True, text=True)
            m = re.search(r"batch encoding done in (\d+) ms", r.stderr + r.stdout)
            theirs.append((float(m.group(1)), peak_rss_kb(r.stderr)))
    # FLOPs: the patch convolution, per layer Q/K/V/O and the FFN over every patch, attention's two products,
    # the projection of the pooled rows (a model of Gemma 3's shape; the synthetic defaults).
    d, ff, L, n = 1152, 4304, 27, (896 // 14) ** 2
    flops = 2 * n * (3 * 14 * 14) * d + L * (2 * n * (4 * d * d + 2 * d * ff) + 4 * n * n * d) + 2 * 256 * d * 2560
    out = {"image": info.get("image"), "tokens": info.get("tokens"), "threads": a.threads, "reps": a.reps,
           "gflop": round(flops / 1e9, 1),
           "cachet_ms": round(statistics.median(t for t, _ in ours), 1),
           "cachet_peak_rss_mb": round(max(m for _, m in ours) / 1024, 1),
           "cachet_scratch_mb": round(info.get("scratch_bytes", 0) / 2**20, 1)}
    out["cachet_gflops"] = round(flops / out["cachet_ms"] / 1e6, 1)
    if theirs:
        out["llamacpp_ms"] = round(statistics.median(t for t, _ in theirs), 1)
        out["llamacpp_peak_rss_mb"] = round(max(m for _, m in theirs) / 1024, 1)
        out["llamacpp_gflops"] = round(flops / out["llamacpp_ms"] / 1e6, 1)
        out["cachet_speedup"] = round(out["llamacpp_ms"] / out["cachet_ms"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
