#!/usr/bin/env python3
"""An agent-style load on a hybrid (Qwen3.5-shaped) file: U users, each T turns; every turn resends the whole
conversation (a long shared system prompt, then per turn a 200-400-token user message and the model's reply) as
a plain streamed completion. Engines one after the other on the same file and threads: cachet with its prefix
cache (state checkpoints, docs/hybrid.md), cachet without, and llama.cpp's llama-server (--parallel U, its
prompt cache and context checkpoints on as by default). Reports TTFT p50/p99 per turn, prompt tokens per turn,
cached tokens, completion tokens/s and wall time per engine.

    .venv/bin/python bench/agent_turns.py -m FILE [--users 8] [--turns 10] [--system-words 1500]
        [--turn-words 150,300] [--engines on,off,llama] [-t 2] [--max-tokens 32]
"""
import argparse
import json
import os
import pathlib
import random
import shlex
import subprocess
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from prefix_workloads import WORDS, chat_stream, free_port, pct, wait_ready  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def conversation_parts(users, turns, system_words, turn_words, seed=56):
    rng = random.Random(seed)
    system = "System: you are an agent with tools. " + " ".join(rng.choice(WORDS) for _ in range(system_words))
    lo, hi = turn_words
    msgs = [[" ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) for _ in range(turns)]
            for _ in range(users)]
    return system, msgs


def run(port, system, msgs, max_tokens):
    users, turns = len(msgs), len(msgs[0])
    rec = [[None] * turns for _ in range(users)]  # (ttft, prompt tokens, cached tokens, completion tokens)
    errors = []

    def user(u):
        try:
            text = system
            for t in range(turns):
                text += "\nUser: " + msgs[u][t] + "\nAssistant:"
                usage = {}
                ttft, n, reply = chat_stream(port, text, max_tokens, usage)
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                rec[u][t] = (ttft, usage.get("prompt_tokens", 0), cached, n)
                text += reply
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    t0 = time.time()
    threads = [threading.Thread(target=user, args=(u,)) for u in range(users)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.time() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} user(s) failed: {errors[0]}")
    per_turn = []
    for t in range(turns):
        col = [rec[u][t] for u in range(users)]
        per_turn.append({"turn": t + 1, "ttft_p50_s": pct([c[0] for c in col], 50),
                         "ttft_p99_s": pct([c[0] for c in col], 99),
                         "prompt_tokens_mean": sum(c[1] for c in col) / users,
                         "cached_tokens_mean": sum(c[2] for c in col) / users})
    completion = sum(rec[u][t][3] for u in range(users) for t in range(turns))
    return {"wall_s": wall, "completion_tokens": completion, "tok_s": completion / wall, "turns": per_turn}


def start(engine, a):
    port = free_port()
    if engine in ("on", "off"):
        cmd = [a.cachet, "serve", "-m", a.model, "--port", str(port), "-t", str(a.threads),
               "--parallel", str(a.users), "--kv-memory", a.kv_memory, "-c", str(a.ctx)]
        if engine == "off":
            cmd.append("--no-prefix-cache")
        cmd += shlex.split(a.cachet_args)
    else:
        cmd = [a.llama_server, "-m", a.model, "--port", str(port), "-t", str(a.threads), "--parallel", str(a.users),
               "-c", str(a.ctx * a.users), "--log-disable"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_ready(port, proc, timeout=600)
    return port, proc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--system-words", type=int, default=1500,
                    help="words of the shared system prompt (a real tokenizer: ~1.3 tokens a word; the synthetic "
                         "files' byte-level one: ~7)")
    ap.add_argument("--turn-words", default="150,300", help="words of a user message: min,max")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--engines", default="on,off,llama")
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--kv-memory", default="2GiB")
    ap.add_argument("--cachet", default=str(ROOT / "build" / "cachet"))
    ap.add_argument("--cachet-args", default="", help="more `cachet serve` flags, e.g. '--batch-tokens 128'")
    ap.add_argument("--llama-server", default=str(pathlib.Path.home() / ".cache/cachet/llama.cpp/native/bin/llama-server"))
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    system, msgs = conversation_parts(a.users, a.turns, a.system_words, tuple(map(int, a.turn_words.split(","))))
    names = {"on": "cachet (prefix cache)", "off": "cachet --no-prefix-cache", "llama": "llama-server"}
    results = {}
    for e in a.engines.split(","):
        port, proc = start(e, a)
        try:
            results[e] = run(port, system, msgs, a.max_tokens)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        print(json.dumps({"engine": names[e], **results[e]}), flush=True)
    print(f"\n{a.users} users x {a.turns} turns, system prompt {a.system_words} words, replies {a.max_tokens} tokens, "
          f"{a.threads} threads")
    print("\n| turn | prompt tokens | " + " | ".join(f"{names[e]} TTFT p50 / p99 s (cached)" for e in results) + " |")
    print("|---|---|" + "---|" * len(results))
    for t in range(a.turns):
        first = next(iter(results.values()))["turns"][t]
        cells = [f"{r['turns'][t]['ttft_p50_s']:.2f} / {r['turns'][t]['ttft_p99_s']:.2f} "
                 f"({r['turns'][t]['cached_tokens_mean']:.0f})" for r in results.values()]
        print(f"| {t + 1} | {first['prompt_tokens_mean']:.0f} | " + " | ".join(cells) + " |")
    print("\n| engine | wall s | completion tok/s |")
    print("|---|---|---|")
    for e, r in results.items():
        print(f"| {names[e]} | {r['wall_s']:.1f} | {r['tok_s']:.2f} |")


if __name__ == "__main__":
    main()
