#!/usr/bin/env python3
"""Issue #18's context-extension report: perplexity against context length and passkey accuracy, for each RoPE
scaling (none, linear, NTK, YaRN), on the default model (trained at 8k) and data/kjv_genesis_exodus.txt (91k
tokens of the KJV, shipped). Writes a table (markdown) and a PNG plot of perplexity against context.

    .venv/bin/python bench/long_context.py [--contexts 2048,4096,8192,16384,32768] [--scale 4] [--score 1024]
        [--schemes none,linear,ntk,yarn] [--passkey-contexts 1024,4096,8192,16384,32768] [--passkey-depths 0.1,0.5,0.9]
        [--kv-type f16] [-o bench/results/DIR]

Every context scores the same text: the --score tokens that end at token --end of the text (default: the largest
context), each predicted from the C tokens before it (`cachet perplexity --skip END-C --ctx C --score-last N`). So
the curve changes only with the context the model reads, not with which part of the text is scored (scoring the
second half of the first C tokens, as llama.cpp's chunks do, reads Genesis at 2k and Exodus at 32k). The
scalings use factor --scale over the model's trained context (YaRN's original context is the file's; NTK's base
is theta * s^(d/(d-2))).
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
    ap.add_argument("--score", type=int, default=1024, help="predictions scored, the same at every context")
    ap.add_argument("--end", type=int, default=0, help="text token where the scored run ends (0: largest context)")
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--passkey-depths", default="0.1,0.5,0.9")
    ap.add_argument("--kv-type", default="f16")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("-o", "--out", default=str(ROOT / "bench" / "results" / "long-context"))
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    model = ["-m", a.model] if a.model else []
    common = ["-t", str(a.threads), "--kv-type", a.kv_type]
    schemes = {s: SCHEMES[s] for s in a.schemes.split(",")}
    contexts = [int(x) for x in a.contexts.split(",")] if a.contexts else []
    end = a.end or max(contexts, default=0)
    ppl = {s: {} for s in schemes}
    for c in contexts:
        if a.score >= c or c > end:
            sys.exit(f"context {c}: needs --score < context <= --end")
        for s, flags in schemes.items():
            scale = ["--rope-scale", str(a.scale)] if flags else []
            j = cachet("perplexity", *model, "-f", str(TEXT), "-c", str(c), "--chunks", "1", "--skip", str(end - c),
                       "--score-last", str(a.score), *common, *flags, *scale, "--json")
            ppl[s][c] = j["ppl"]
            print(json.dumps({"what": "ppl", "scheme": s, "scale": a.scale, "ctx": c, "end": end, "score": a.score,
                              "ppl": j["ppl"], "seconds": j["seconds"]}), flush=True)
    keys = {s: {} for s in schemes}
    for s, flags in schemes.items() if a.passkey_contexts else []:
        scale = ["--rope-scale", str(a.scale)] if flags else []
        ctxs = a.passkey_contexts.split(",")
        j = cachet("passkey", *model, "-c", *ctxs, "--depth", *a.passkey_depths.split(","), "--trials", "1", *common,
                   *flags, *scale, "--json")
        for r in j["results"]:
            keys[s].setdefault(r["context"], []).append(r["found"] / r["trials"])
        print(json.dumps({"what": "passkey", "scheme": s, "scale": a.scale, "results": j["results"]}), flush=True)
    lines = [f"# Perplexity and passkey against context (scale {a.scale:g}, KV {a.kv_type})", "",
             f"Perplexity of the same {a.score} tokens (text tokens {end - a.score}..{end}) read with each context.",
             "", "| context | " + " | ".join(f"PPL {s}" for s in schemes) + " |", "|---|" + "---|" * len(schemes)]
    for c in contexts:
        lines.append(f"| {c} | " + " | ".join(f"{ppl[s][c]:.3f}" for s in schemes) + " |")
    if a.passkey_contexts:
        lines += ["", "| context | " + " | ".join(f"passkey {s}" for s in schemes) + " |",
                  "|---|" + "---|" * len(schemes)]
        for c in sorted(next(iter(keys.values()))):
            lines.append(f"| {c} | " + " | ".join(f"{sum(keys[s][c]) / len(keys[s][c]):.0%}" for s in schemes) + " |")
    (out / f"long-context-x{a.scale:g}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (bash scripts/setup_bench.sh installs it)", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if not contexts:
        return
    for s in schemes:
        cs = sorted(ppl[s])
        ax.plot(cs, [ppl[s][c] for c in cs], marker="o", label=s)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel(f"perplexity of the same {a.score} tokens")
    ax.set_title(f"Default model, KJV Genesis-Exodus, RoPE scaling x{a.scale:g}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"ppl-vs-context-x{a.scale:g}.png", dpi=120)


if __name__ == "__main__":
    main()
