"""Encoder time for one image and its memory: `cachet encode-image` side by side with llama.cpp's
llama-mtmd-cli (its "encoded in N ms"), same projector file, image and threads, engines alternating, medians of
--reps runs. The default files are synthetic and written to the cache once:
  --shape gemma3: Gemma 3's projector (SigLIP 27 x 1152, 896 px, F16) on a one-layer 2560-wide Gemma 3, a
    768 x 1024 photo;
  --shape qwen3vl-2b: Qwen3-VL-2B's pair (ViT 24 x 1024 in 16 px patches, merged 2 x 2 into 2048, deepstack after
    layers 6, 12 and 18; F16) with its language model (28 layers, 2048 wide, 16 / 8 heads of 128, FFN 6144,
    151936 tokens, Q4_K), an 896 x 896 photo (784 rows), and --ttft: the time to the first token of a one-image
    question (`cachet run`'s ttft_ms; mtmd-cli's wall time from the start of its encoding to its exit after one
    token).
Prints one JSON line, with the FLOPs per image and what they come to per second.

  python3 bench/vision_encoder.py --mtmd-cli ~/.cache/cachet/llama.cpp/native/bin/llama-mtmd-cli [--reps 3]
  python3 bench/vision_encoder.py --shape qwen3vl-2b --ttft --mtmd-cli ...
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
    ap.add_argument("--shape", choices=["gemma3", "qwen3vl-2b"], default="gemma3")
    ap.add_argument("--ttft", action="store_true", help="also the first token of a one-image question")
    a = ap.parse_args()
    os.makedirs(CACHE, exist_ok=True)
    qwen = a.shape == "qwen3vl-2b"
    if qwen:
        mm = a.mmproj or synth(a.cachet, os.path.join(CACHE, "mmproj-qwen3vl-2b-shape-f16.gguf"),
                               ["--arch", "mmproj-qwen3vl", "--type", "F16", "--n-embd", "1024", "--n-ff", "4096",
                                "--n-layer", "24", "--n-head", "16", "--image-size", "768", "--patch-size", "16",
                                "--merge", "2", "--proj-dim", "2048", "--deepstack", "3"])
        lm = a.model or synth(a.cachet, os.path.join(CACHE, "qwen3vl-2b-shape-q4k.gguf"),
                              ["--arch", "qwen3vl", "--type", "Q4_K", "--embd-type", "Q6_K", "--n-embd", "2048",
                               "--n-layer", "28", "--n-head", "16", "--n-head-kv", "8", "--head-dim", "128",
                               "--n-ff", "6144", "--n-vocab", "151936"])
    else:
        mm = a.mmproj or synth(a.cachet, os.path.join(CACHE, "mmproj-gemma3-shape-f16.gguf"),
                               ["--arch", "mmproj-gemma3", "--type", "F16", "--n-embd", "1152", "--n-ff", "4304",
                                "--n-layer", "27", "--n-head", "16", "--image-size", "896", "--patch-size", "14",
                                "--merge", "4", "--proj-dim", "2560"])
        lm = a.model or synth(a.cachet, os.path.join(CACHE, "gemma3-2560-1l.gguf"),
                              ["--arch", "gemma3", "--type", "F16", "--n-embd", "2560", "--n-layer", "1",
                               "--n-head", "8", "--n-head-kv", "4", "--head-dim", "256", "--n-ff", "512"])
    w, h = (896, 896) if qwen else (768, 1024)
    img = os.path.join(CACHE, f"bench-photo-{w}x{h}.jpg")
    if not os.path.exists(img):
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([np.sin(x / 37 + c) * np.cos(y / 23 - c) for c in range(3)], -1) * 100 + 128
        noise = np.random.default_rng(0).normal(0, 20, base.shape)
        Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8)).save(img, quality=90)
    question = "Describe this picture in one sentence."
    ours, theirs, ttft_ours, ttft_theirs, info = [], [], [], [], {}
    for _ in range(a.reps):
        r = subprocess.run(["/usr/bin/time", "-v", a.cachet, "encode-image", "--mmproj", mm, "--image", img, "-t",
                            str(a.threads)], check=True, capture_output=True, text=True)
        info = json.loads(r.stdout)
        ours.append((info["encode_ms"], peak_rss_kb(r.stderr)))
        if a.ttft:
            r = subprocess.run([a.cachet, "run", "-m", lm, "--mmproj", mm, "--image", img, "-p",
                                "<|im_start|>user\n<__media__>" + question + "<|im_end|>\n<|im_start|>assistant\n",
                                "-n", "1", "--temp", "0", "-t", str(a.threads), "--format", "json"],
                               check=True, capture_output=True, text=True)
            ttft_ours.append(json.loads(r.stdout)["timings"]["ttft_ms"])
        if a.mtmd_cli:
            r = subprocess.run(["/usr/bin/time", "-v", a.mtmd_cli, "-m", lm, "--mmproj", mm, "--image", img, "-p",
                                question, "-n", "1", "-t", str(a.threads), "--temp", "0", "--chat-template",
                                "chatml" if qwen else "gemma"], check=True, capture_output=True, text=True)
            log = r.stderr + r.stdout
            m = re.search(r"(?:batch encoding done|image slice encoded) in (\d+) ms", log)
            theirs.append((float(m.group(1)), peak_rss_kb(r.stderr)))
            # Its first token ends the run (-n 1): the wall time past the start of the image's encoding (its log's
            # timestamp; before it, the model's load and the first few text ids).
            start = re.search(r"(\d+)\.(\d+)\.(\d+)\.(\d+) I encoding mtmd batch", log)
            wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", log)
            if a.ttft and start and wall:
                g = [int(x) for x in start.groups()]  # minutes.seconds.ms.us
                t0 = g[0] * 60 + g[1] + g[2] / 1e3 + g[3] / 1e6
                t1 = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))
                ttft_theirs.append(round((t1 - t0) * 1000, 1))
    # FLOPs: the patch convolution, per layer Q/K/V/O and the FFN over every patch, attention's two products,
    # the projector's head (a model of the shape's; the synthetic defaults).
    if qwen:
        d, ff, L, n, P = 1024, 4096, 24, (896 // 16) ** 2, 16
        M = 4 * d
        head = 4 * (n // 4) * (2 * M * M + 2 * M * 2048)  # the merger and 3 deepstack mergers
    else:
        d, ff, L, n, P = 1152, 4304, 27, (896 // 14) ** 2, 14
        head = 2 * 256 * d * 2560
    flops = 2 * n * (3 * P * P) * d + L * (2 * n * (4 * d * d + 2 * d * ff) + 4 * n * n * d) + head
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
    if ttft_ours:
        out["cachet_ttft_ms"] = round(statistics.median(ttft_ours), 1)
    if ttft_theirs:
        out["llamacpp_ttft_ms"] = round(statistics.median(ttft_theirs), 1)
        out["cachet_ttft_speedup"] = round(out["llamacpp_ttft_ms"] / out["cachet_ttft_ms"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
