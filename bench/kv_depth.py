#!/usr/bin/env python3
"""Decode speed deep in context by KV cache type, cachet and llama.cpp side by side (issue #18's report).

  .venv/bin/python bench/kv_depth.py -m MODEL.gguf [-m ...] --depths 4096,16384 --types f16,q8_0,q4_0 \
      [-n 32] [-r 2] [-t 2] [--llama-bench ~/.cache/cachet/llama.cpp/native/bin/llama-bench] [--json-out F]

For every model, depth and repetition, each KV type runs once in each engine, the engines alternating, so the
machine's noise hits every cell alike. cachet: `cachet_bench -p DEPTH -n N --kv-type T` (K and V of type T,
decode tok/s of N tokens after a DEPTH-token random prompt). llama.cpp: `llama-bench -p 0 -n N -d DEPTH -ctk T
-ctv T -fa on` (a quantized V cache needs its flash attention; f16 also with `-fa off`, the faster of the two
counting). Prints a markdown table of medians: decode tok/s per engine, the ratio between them, and each
engine's speed-up over its own f16 cache at that depth.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from compare_llamacpp import ROOT, run_json


# Cache types llama.cpp also has; q4r (cachet's own 4-bit scheme) runs in cachet alone.
LLAMA_KV_TYPES = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"}


def llama_tg(binary, model, threads, depth, n_gen, kv, fa):
    out = subprocess.run([binary, "-m", model, "-t", str(threads), "-r", "1", "-o", "json", "-p", "0", "-n",
                          str(n_gen), "-d", str(depth), "-ctk", kv, "-ctv", kv, "-fa", fa],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]["avg_ts"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", action="append", required=True)
    ap.add_argument("--depths", default="4096,16384")
    ap.add_argument("--types", default="f16,q8_0,q4_0")
    ap.add_argument("-n", "--n-gen", type=int, default=32)
    ap.add_argument("-r", "--reps", type=int, default=2)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--bench", default=str(ROOT / "build" / "bench" / "cachet_bench"))
    ap.add_argument("--llama-bench", help="llama.cpp's llama-bench (omit to run cachet alone)")
    ap.add_argument("--json-out", help="append every run as a JSON line here")
    ap.add_argument("--f16-fa", default="off,on", help="llama.cpp flash-attention modes tried for an f16 cache "
                    "(the faster counts; 'off' alone when its flash attention is known slower here, to save time)")
    a = ap.parse_args()
    depths = [int(d) for d in a.depths.split(",")]
    types = a.types.split(",")
    res = {}  # (model, depth, type, engine) -> [tok/s]
    log = open(a.json_out, "a") if a.json_out else None
    for model in a.model:
        for depth in depths:
            for _ in range(a.reps):
                for kv in types:
                    runs = [("cachet", lambda: run_json([a.bench, "-m", model, "-t", str(a.threads), "-r", "1", "-p",
                                                          str(depth), "-n", str(a.n_gen), "--kv-type", kv])["tg_tok_s"])]
                    if a.llama_bench and kv in LLAMA_KV_TYPES:
                        # A quantized V cache needs llama.cpp's flash attention; an f16 one runs both ways and
                        # the faster counts (its CPU flash attention is the slower path for f16 here).
                        for fa in (a.f16_fa.split(",") if kv == "f16" else ["on"]):
                            runs.append((f"llama.cpp fa {fa}",
                                         lambda fa=fa: llama_tg(a.llama_bench, model, a.threads, depth, a.n_gen, kv, fa)))
                    for engine, run in runs:
                        tps = run()
                        res.setdefault((model, depth, kv, engine), []).append(tps)
                        line = {"model": os.path.basename(model), "depth": depth, "kv": kv, "engine": engine,
                                "threads": a.threads, "n_gen": a.n_gen, "tg_tok_s": tps}
                        print(json.dumps(line), file=sys.stderr, flush=True)
                        if log:
                            print(json.dumps(line), file=log, flush=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    for (model, depth, kv, engine) in list(med):
        if engine.startswith("llama.cpp"):
            key = (model, depth, kv, "llama.cpp")
            med[key] = max(med.get(key, 0.0), med[(model, depth, kv, engine)])
    print(f"decode of {a.n_gen} tokens after DEPTH random prompt tokens, {a.threads} threads, medians of {a.reps} "
          f"alternating runs\n")
    print("| model | depth | KV | cachet tok/s | llama.cpp tok/s | cachet / llama.cpp | vs f16, cachet | "
          "vs f16, llama.cpp |")
    print("|---|---|---|---|---|---|---|---|")
    for model in a.model:
        for depth in depths:
            for kv in types:
                c = med[(model, depth, kv, "cachet")]
                lc = med.get((model, depth, kv, "llama.cpp"))
                c0 = med.get((model, depth, "f16", "cachet"))
                l0 = med.get((model, depth, "f16", "llama.cpp"))
                fmt = lambda x: f"{x:.1f}" if x else "-"
                ratio = lambda x, y: f"{x / y:.2f}x" if x and y else "-"
                print(f"| {os.path.basename(model)} | {depth} | {kv} | {fmt(c)} | {fmt(lc)} | {ratio(c, lc)} | "
                      f"{ratio(c, c0)} | {ratio(lc, l0)} |")


if __name__ == "__main__":
    main()
