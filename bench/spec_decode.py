#!/usr/bin/env python3
"""Issue #17's speculative decoding benchmark: cachet's server (no speculation, prompt lookup, draft model)
against llama.cpp's llama-server (no speculation, --spec-type ngram-simple, -md DRAFT) on the same files, and the
file's own multi-token-prediction head (cachet --mtp, llama-server --spec-type draft-mtp), same
thread count and `--parallel` equal to the number of concurrent clients, greedy, /v1/chat/completions.

Workloads (the default model is an instruct model: chat-templated requests):
  grounded: rewrite a given passage (paragraphs of ../shared/seeds) or edit a given code file (bench/*.py):
            the output copies long runs of the input, so lookup pays
  open:     open-ended chat questions (nothing to copy)

Each (workload, concurrency) runs every engine once per round, engines alternating, for --rounds rounds;
reported: median completion tokens/s of the rounds, and acceptance where the server reports it.

    .venv/bin/python bench/spec_decode.py --target T.gguf --draft D.gguf [--batches 1,4,16] [--rounds 2]
    .venv/bin/python bench/spec_decode.py --target QWEN35_WITH_MTP.gguf --engines cachet-off,cachet-mtp,llama-off,llama-mtp
"""
import argparse
import json
import os
import pathlib
import random
import re
import statistics
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import threading  # noqa: E402
import time  # noqa: E402

from loadgen import metric_values  # noqa: E402
from prefix_workloads import chat_stream, free_port, wait_ready  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def passages():
    text = "\n".join(p.read_text(errors="replace") for p in sorted((ROOT.parent / "shared" / "seeds").glob("00*.txt")))
    paras = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
    return [p for p in paras if 400 <= len(p) <= 1200 and p.count(" ") > 60]


def code_files():
    out = []
    for p in sorted((ROOT / "bench").glob("*.py")):
        src = p.read_text()
        for m in re.finditer(r"\ndef [a-z_]+\(.*?\n(?=\ndef |\Z)", src, re.S):
            body = m.group(0).strip()
            if 300 <= len(body) <= 1400:
                out.append(body)
    return out


def workload(name, n):
    rng = random.Random(17)
    if name == "grounded":
        ps, cs = passages(), code_files()
        reqs = []
        for i in range(n):
            if i % 2 == 0:
                p = ps[(i // 2) % len(ps)]
                msg = f"Rewrite the following passage in plain words, keeping every fact and its order:\n\n{p}"
            else:
                c = cs[(i // 2) % len(cs)]
                msg = ("Here is a Python function. Rename every variable called `r` to `result` and return the whole "
                       f"function, unchanged otherwise, in a code block.\n\n```python\n{c}\n```")
            reqs.append([([{"role": "user", "content": msg}], 256)])
        return reqs
    topics = ["a lighthouse keeper", "the history of bread", "why the sky is blue", "a robot learning to paint",
              "how volcanoes form", "a city under the sea", "the life of a honeybee", "chess strategy for beginners",
              "a letter to a future self", "how airplanes stay up", "a dragon who is afraid of fire",
              "the water cycle", "a day on Mars", "the invention of the printing press", "a friendly ghost",
              "how computers store numbers"]
    rng.shuffle(topics)
    return [[([{"role": "user", "content": f"Tell me about {topics[i % len(topics)]}."}], 256)] for i in range(n)]


def run(port, conversations, clients, max_tokens):
    """Every request by `clients` concurrent clients: completion tokens over wall time (end to end, prompts
    included), and the decode rate per request, (tokens - 1) / (time after its first token), averaged."""
    queue, lock, out, errors = list(range(len(conversations))), threading.Lock(), [], []

    def worker():
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    i = queue.pop(0)
                t0 = time.time()
                ttft, n, _ = chat_stream(port, conversations[i][0][0], min(max_tokens, conversations[i][0][1]))
                with lock:
                    out.append((ttft, time.time() - t0, n))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    t0 = time.time()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    if errors:
        raise RuntimeError(errors[0])
    tokens = sum(n for _, _, n in out)
    decode = statistics.mean((n - 1) / (total - ttft) for ttft, total, n in out if n > 1 and total > ttft)
    return {"wall_s": wall, "completion_tokens": tokens, "tok_s": tokens / wall, "decode_tok_s_per_request": decode}


def start(engine, a, clients):
    port = free_port()
    engine, _, tag = engine.partition("@")  # "cachet-lookup@old": the same engine from --cachet-old (A/B)
    if engine.startswith("cachet"):
        binary = a.cachet_old if tag == "old" else str(ROOT / "build" / "cachet")
        cmd = [binary, "serve", "-m", a.target, "--port", str(port), "-t", str(a.threads),
               "--parallel", str(clients), "--kv-memory", "1GiB", "-c", "4096", "--draft-max", str(a.draft_max)]
        if engine == "cachet-lookup":
            cmd.append("--lookup")
        elif engine == "cachet-mtp":
            cmd.append("--mtp")
        elif engine in ("cachet-draft", "cachet-draft-ownkv"):
            cmd += ["--draft-model", a.draft, "--draft-vocab", str(a.draft_vocab)]
            if engine == "cachet-draft-ownkv":  # a same-shape draft with a cache of its own (--draft-own-kv)
                cmd.append("--draft-own-kv")
    else:
        cmd = [a.llama_server, "-m", a.target, "--port", str(port), "-t", str(a.threads), "--parallel", str(clients),
               "-c", str(4096 * clients), "--log-disable"]
        if engine == "llama-ngram":
            cmd += ["--spec-type", "ngram-simple", "--spec-draft-n-max", str(a.draft_max)]
        elif engine == "llama-mtp":
            cmd += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(a.draft_max)]
        elif engine == "llama-draft":
            cmd += ["-md", a.draft, "--spec-draft-n-max", str(a.draft_max), "-td", str(a.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_ready(port, proc)
    return port, proc


def spec_counts(port):
    """cachet's vllm:spec_decode_* counters (None for llama-server)."""
    return metric_values(port, ("vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", default="", help="the draft model of the -draft engines")
    ap.add_argument("--workloads", default="grounded,open")
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--engines", default="cachet-off,cachet-lookup,cachet-draft,llama-off,llama-ngram,llama-draft")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=0, help="requests per run (0: max(8, 2 x batch))")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--completions", action="store_true",
                    help="plain /v1/completions of each message's text (a model without a chat template)")
    ap.add_argument("--draft-max", type=int, default=8)
    ap.add_argument("--draft-vocab", type=int, default=0, help="cachet's --draft-vocab (0: the whole vocabulary)")
    ap.add_argument("--llama-server", default=str(pathlib.Path.home() / ".cache/cachet/llama.cpp/native/bin/llama-server"))
    ap.add_argument("--cachet-old", default="", help="another cachet binary, for engines named ENGINE@old (A/B)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    rows = []
    for w in a.workloads.split(","):
        for b in [int(x) for x in a.batches.split(",")]:
            conversations = workload(w, a.requests or max(8, 2 * b))
            if a.completions:
                conversations = [[(msgs[-1]["content"], n)] for [(msgs, n)] in conversations]
            res = {e: [] for e in a.engines.split(",")}
            dec = {e: [] for e in a.engines.split(",")}
            acc = {}
            for rnd in range(a.rounds):
                for e in a.engines.split(","):
                    port, proc = start(e, a, b)
                    try:
                        r = run(port, conversations, b, a.max_tokens)
                        sc = spec_counts(port) if e.startswith("cachet") else None
                    finally:
                        proc.terminate()
                        proc.wait(timeout=60)
                    res[e].append(r["tok_s"])
                    dec[e].append(r["decode_tok_s_per_request"])
                    if sc and sc.get("vllm:spec_decode_num_draft_tokens"):
                        acc[e] = sc["vllm:spec_decode_num_accepted_tokens"] / sc["vllm:spec_decode_num_draft_tokens"]
                    print(json.dumps({"workload": w, "batch": b, "round": rnd, "engine": e, **r}), flush=True)
            for e, v in res.items():
                rows.append({"workload": w, "batch": b, "engine": e, "tok_s": statistics.median(v), "runs": v,
                             "decode": statistics.median(dec[e]), "acceptance": acc.get(e)})
    print(f"\n| workload | batch | engine | completion tok/s, end to end (median of {a.rounds}) | vs its engine off | "
          "decode tok/s per request | vs off | acceptance |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        name, at, tag = r["engine"].partition("@")
        same = [x for x in rows if x["workload"] == r["workload"] and x["batch"] == r["batch"]]
        # The same binary's off run; without one (an @old engine beside the new off only), the new off.
        base = next((x for x in same if x["engine"] == name.split("-")[0] + "-off" + at + tag),
                    next(x for x in same if x["engine"] == name.split("-")[0] + "-off"))
        accs = f"{r['acceptance']:.0%}" if r["acceptance"] is not None else ""
        print(f"| {r['workload']} | {r['batch']} | {r['engine']} | {r['tok_s']:.1f} | {r['tok_s'] / base['tok_s']:.2f}x | "
              f"{r['decode']:.1f} | {r['decode'] / base['decode']:.2f}x | {accs} |")


if __name__ == "__main__":
    main()
