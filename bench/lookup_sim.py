#!/usr/bin/env python3
"""Prompt-lookup proposals replayed offline (issue #17): the greedy outputs of the grounded workload of
bench/spec_decode.py (rewrite a passage, edit a code function; `cachet run`, greedy), then for each proposer
variant a walk along each output: at every step propose from prompt + output so far, accept the prefix equal to
the real output, emit it plus one token. Tokens per step is the speed-up at free verification; acceptance and
proposed tokens per step say what verification costs. No server, no timing noise: the proposer's quality alone.

    .venv/bin/python bench/lookup_sim.py [-m MODEL] [--requests 8] [--cache runs.json]
"""
import argparse
import json
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from spec_decode import workload  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHET = str(ROOT / "build" / "cachet")


def greedy_runs(model, n):
    m = ["-m", model] if model else []
    runs = []
    for sess in workload("grounded", n):
        msgs, max_tokens = sess[0]
        text = subprocess.run([CACHET, "template", *m, "--messages", "-"], input=json.dumps(msgs),
                              capture_output=True, text=True, check=True).stdout
        toks = json.loads(subprocess.run([CACHET, "tokenize", *m, "--text", text, "--parse-special", "--no-add-special",
                                          "--json"], capture_output=True, text=True, check=True).stdout)
        ids = [t["id"] if isinstance(t, dict) else t for t in (toks["ids"] if isinstance(toks, dict) else toks)]
        out = json.loads(subprocess.run([CACHET, "run", *m, "--prompt-ids", " ".join(map(str, ids)), "-n",
                                         str(max_tokens), "--format", "json"], capture_output=True, text=True,
                                        check=True).stdout)
        runs.append({"prompt": ids, "out": out["token_ids"]})
    return runs


def latest(toks, n, k):
    """The continuation (at most k) after the latest earlier occurrence of toks' last n tokens (spec/lookup.cc)."""
    if len(toks) <= n:
        return []
    suffix = toks[-n:]
    for s in range(len(toks) - n - 1, -1, -1):
        if toks[s:s + n] == suffix:
            return toks[s + n:s + n + k]
    return []


def walk(runs, propose):
    steps = emitted = proposed = accepted = 0
    for r in runs:
        toks, out, i = list(r["prompt"]), r["out"], 0
        while i < len(out):
            d = propose(toks)
            a = 0
            while a < len(d) and i + a < len(out) and d[a] == out[i + a]:
                a += 1
            e = min(a + 1, len(out) - i)
            toks += out[i:i + e]
            i += e
            steps, emitted, proposed, accepted = steps + 1, emitted + e, proposed + len(d), accepted + a
    return {"tokens_per_step": emitted / steps, "acceptance": accepted / max(proposed, 1),
            "proposed_per_step": proposed / steps, "steps": steps}


def ngrams(nmax, nmin, k, k_unigram=0):
    def propose(toks):
        for n in range(nmax, nmin - 1, -1):
            d = latest(toks, n, k)
            if d:
                return d
        return latest(toks, 1, k_unigram) if k_unigram else []
    return propose


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default="")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--cache", default="")
    a = ap.parse_args()
    cache = pathlib.Path(a.cache) if a.cache else None
    if cache and cache.exists():
        runs = json.loads(cache.read_text())
    else:
        runs = greedy_runs(a.model, a.requests)
        if cache:
            cache.write_text(json.dumps(runs))
    print(f"{len(runs)} requests, {sum(len(r['out']) for r in runs)} output tokens\n")
    print("| proposer | k | tokens/step | acceptance | proposed/step |")
    print("|---|---|---|---|---|")
    variants = [("n-gram 4..2 (cachet's)", lambda k: ngrams(4, 2, k)), ("n-gram 8..2", lambda k: ngrams(8, 2, k)),
                ("n-gram 3..1", lambda k: ngrams(3, 1, k)),
                ("n-gram 4..2, then 1-gram for 2 tokens", lambda k: ngrams(4, 2, k, 2))]
    for name, make in variants:
        for k in (4, 8, 16):
            r = walk(runs, make(k))
            print(f"| {name} | {k} | {r['tokens_per_step']:.2f} | {r['acceptance']:.0%} | {r['proposed_per_step']:.1f} |")


if __name__ == "__main__":
    main()
