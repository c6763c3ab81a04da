#!/usr/bin/env python3
"""Issue #18's context-extension report: perplexity against context length and passkey accuracy, for each RoPE
scaling (none, linear, NTK, YaRN), on the default model (trained at 8k) and data/kjv_genesis_exodus.txt (91k
tokens of the KJV, shipped). Writes a table (markdown) and a PNG plot of perplexity against context.

    .venv/bin/python bench/long_context.py [--contexts 2048,4096,8192,16384,32768] [--scale 4] [--chunks 1]
        [--passkey-contexts 1024,4096,8192,16384,32768] [--kv-type f16] [-o bench/results/DIR]

Perplexity at context C scores the second half of each C-token chunk (llama.cpp's measure), so it reads what the
model makes of positions C/2..C. The scalings use factor --scale over the model's trained context (YaRN's
original context is the file's; NTK's base is theta * s^(d/(d-2))).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEXT = ROOT / "data" / "kjv_genesis_exodus.txt"
SCHEMES = {"none": [], "linear": ["--rope-scaling", "linear"], "ntk": ["--rope-scaling", "ntk"],
           "yarn": ["--rope-scaling", "yarn"]}


def cachet(*args):
    out = subprocess.run([str(ROOT / "build" / "cachet"), *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default="")
    ap.add_argument("--contexts", default="2048,4096,8192,16384,32768")
    ap.add_argument("--passkey-contexts", default="1024,4096,8192,16384,32768")
    ap.add_argument("--scale", type=float, default=4.0)
    ap.add_argument("--chunks", type=int, default=1)
    ap.add_argument("--kv-type", default="f16")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("-o", "--out", default=str(ROOT / "bench" / "results" / "long-context"))
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    model = ["-m", a.model] if a.model else []
    common = ["-t", str(a.threads), "--kv-type", a.kv_type]
    ppl = {s: {} for s in SCHEMES}
    for c in [int(x) for x in a.contexts.split(",")]:
        for s, flags in SCHEMES.items():
            scale = ["--rope-scale", str(a.scale)] if flags else []
            j = cachet("perplexity", *model, "-f", str(TEXT), "-c", str(c), "--chunks", str(a.chunks), *common,
                       *flags, *scale, "--json")
            ppl[s][c] = j["ppl"]
            print(json.dumps({"what": "ppl", "scheme": s, "ctx": c, "ppl": j["ppl"], "seconds": j["seconds"]}),
                  flush=True)
    keys = {s: {} for s in SCHEMES}
    for s, flags in SCHEMES.items():
        scale = ["--rope-scale", str(a.scale)] if flags else []
        ctxs = a.passkey_contexts.split(",")
        j = cachet("passkey", *model, "-c", *ctxs, "--depth", "0.1", "0.5", "0.9", "--trials", "1", *common, *flags,
                   *scale, "--json")
        for r in j["results"]:
            keys[s].setdefault(r["context"], []).append(r["found"] / r["trials"])
        print(json.dumps({"what": "passkey", "scheme": s, "results": j["results"]}), flush=True)
    lines = [f"# Perplexity and passkey against context (scale {a.scale}, KV {a.kv_type})", "",
             "| context | " + " | ".join(f"PPL {s}" for s in SCHEMES) + " |",
             "|---|" + "---|" * len(SCHEMES)]
    for c in sorted(next(iter(ppl.values()))):
        lines.append(f"| {c} | " + " | ".join(f"{ppl[s][c]:.3f}" for s in SCHEMES) + " |")
    lines += ["", "| context | " + " | ".join(f"passkey {s}" for s in SCHEMES) + " |",
              "|---|" + "---|" * len(SCHEMES)]
    for c in sorted(next(iter(keys.values()))):
        lines.append(f"| {c} | " + " | ".join(f"{sum(keys[s][c]) / len(keys[s][c]):.0%}" for s in SCHEMES) + " |")
    (out / "long-context.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in SCHEMES:
        cs = sorted(ppl[s])
        ax.plot(cs, [ppl[s][c] for c in cs], marker="o", label=s)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("perplexity (second half of each chunk)")
    ax.set_title(f"Default model, KJV Genesis-Exodus, RoPE scaling x{a.scale:g}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "ppl-vs-context.png", dpi=120)


if __name__ == "__main__":
    main()
