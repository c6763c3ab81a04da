#!/usr/bin/env python3
"""Two cachet builds (or two kernel tables) side by side, one run: is B slower than A on this machine?

  .venv/bin/python bench/ab_cachet.py --a OLD/cachet_bench --b build/bench/cachet_bench -m FILE [-m ...]
      [-t 2] [-r 5] [-p 128] [-n 128] [--isa-a avx512bf16 --isa-b amx]

The question a README table cannot answer on a shared host: its ratios against llama.cpp were taken on another
day, often on another machine of the class, and the host moves both engines by +-20% within minutes. Building the
commit that produced the table (`git worktree add /tmp/old REV`, then `cmake`/`ninja cachet_bench` there) and
running it beside HEAD answers "did our code get slower" directly. A and B alternate every repetition (the order
flips each time), and the printed ratio is the median of the per-repetition B / A pairs, so a slow phase of the
host hits both sides of a pair. Per-repetition JSON goes to stderr.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def add_ab_arguments(ap, binary):
    """The arguments every A/B script here takes: the two binaries, the files, threads, repetitions, sizes."""
    ap.add_argument("--a", required=True, help=f"{binary} of the baseline")
    ap.add_argument("--b", required=True, help=f"{binary} under test")
    ap.add_argument("-m", "--model", action="append", required=True)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=5)
    ap.add_argument("-p", "--n-prompt", type=int, default=128)
    ap.add_argument("-n", "--n-gen", type=int, default=128)


def run(binary, isa, model, threads, n_prompt, n_gen):
    env = dict(os.environ)
    if isa:
        env["CACHET_ISA"] = isa
    cmd = [binary, "-m", model, "-t", str(threads), "-p", str(n_prompt), "-n", str(n_gen), "-r", "1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    d = [json.loads(line) for line in out.splitlines() if line.startswith("{")][-1]
    return d["pp_tok_s"], d["tg_tok_s"]


def main():
    ap = argparse.ArgumentParser()
    add_ab_arguments(ap, "cachet_bench")
    ap.add_argument("--isa-a", help="CACHET_ISA for A")
    ap.add_argument("--isa-b", help="CACHET_ISA for B")
    a = ap.parse_args()
    print("| model | A pp tok/s | B pp tok/s | pp B/A | A tg tok/s | B tg tok/s | tg B/A |")
    print("|---|---|---|---|---|---|---|")
    for model in a.model:
        runs = {"a": [], "b": []}
        for rep in range(a.reps):
            order = ("a", "b") if rep % 2 == 0 else ("b", "a")
            for side in order:
                binary, isa = (a.a, a.isa_a) if side == "a" else (a.b, a.isa_b)
                runs[side].append(run(binary, isa, model, a.threads, a.n_prompt, a.n_gen))
            print(json.dumps({"model": model, "rep": rep, "a": runs["a"][-1], "b": runs["b"][-1]}),
                  file=sys.stderr, flush=True)
        med = {s: [statistics.median(r[i] for r in runs[s]) for i in (0, 1)] for s in runs}
        ratio = [statistics.median(b[i] / x[i] for x, b in zip(runs["a"], runs["b"])) for i in (0, 1)]
        name = os.path.basename(model)
        print(f"| {name} | {med['a'][0]:.1f} | {med['b'][0]:.1f} | {ratio[0]:.2f}x "
              f"| {med['a'][1]:.1f} | {med['b'][1]:.1f} | {ratio[1]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
