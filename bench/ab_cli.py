#!/usr/bin/env python3
"""Two `cachet` binaries side by side on what a user runs: `cachet run` end to end (load excluded: the
binary's own TTFT and decode figures), one request of P random prompt ids and N generated tokens, greedy,
end of generation ignored. A and B alternate every repetition (the order flips each time); printed: each
side's median prefill and decode tok/s, and the median of the per-repetition B / A ratios.

  .venv/bin/python bench/ab_cli.py --a OLD/cachet --b build/cachet -m FILE [-m ...] [-t 2] [-r 5] [-p 128] [-n 128]

Written to compare the single-sequence loop `cachet run` used before it went through the library's engine
(commit e136bd3) with the engine path (docs/api.md).
"""
import argparse
import json
import pathlib
import random
import statistics
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ab_cachet import add_ab_arguments  # noqa: E402


def run(binary, model, threads, prompt_ids, n_gen):
    cmd = [binary, "run", "-m", model, "-t", str(threads), "--prompt-ids", " ".join(map(str, prompt_ids)),
           "-n", str(n_gen), "--ignore-eos", "--format", "json"]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    assert len(out["token_ids"]) == n_gen, out
    return out["timings"]["prefill_tok_per_s"], out["timings"]["decode_tok_per_s"], out["token_ids"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_ab_arguments(ap, "cachet")
    a = ap.parse_args()
    print("| model | A pp tok/s | B pp tok/s | pp B/A | A tg tok/s | B tg tok/s | tg B/A | same tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for model in a.model:
        ids = [random.Random(1).randrange(100, 20000) for _ in range(a.n_prompt)]
        res = {"a": [], "b": []}
        same = True
        for rep in range(a.reps):
            order = ["a", "b"] if rep % 2 == 0 else ["b", "a"]
            toks = {}
            for side in order:
                pp, tg, t = run(getattr(a, side), model, a.threads, ids, a.n_gen)
                res[side].append((pp, tg))
                toks[side] = t
            same = same and toks["a"] == toks["b"]
        med = {s: (statistics.median(x[0] for x in res[s]), statistics.median(x[1] for x in res[s])) for s in res}
        pp_ratio = statistics.median(b[0] / x[0] for x, b in zip(res["a"], res["b"]))
        tg_ratio = statistics.median(b[1] / x[1] for x, b in zip(res["a"], res["b"]))
        print(f"| {model.split('/')[-1]} | {med['a'][0]:.1f} | {med['b'][0]:.1f} | {pp_ratio:.2f}x | "
              f"{med['a'][1]:.1f} | {med['b'][1]:.1f} | {tg_ratio:.2f}x | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
