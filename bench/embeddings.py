#!/usr/bin/env python3
"""Embeddings per second from `cachet serve`'s /v1/embeddings, side by side with llama.cpp's llama-server
(`--embeddings`, same file, threads and parallel slots) when --llama-server is given: requests of 1 input
sent one after another, and requests of 32 inputs; inputs of about --tokens tokens. The servers alternate,
medians of --reps runs. Optionally while --chat-clients stream completions from the same server (their tokens per
second reported too).

  python3 bench/embeddings.py -m FILE.gguf [--llama-server ~/.cache/cachet/llama.cpp/native/bin/llama-server]
      [-t 2] [--tokens 128] [--reps 3] [--chat-clients 16]

A file without {arch}.pooling_type needs --pooling (ours: serve --pooling; llama-server: --pooling)."""
import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loadgen import free_port, wait_ready  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "the of and to in a is that for it as was with be by on not he this are or his from at which".split()


def texts(n, tokens, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(tokens)) for _ in range(n)]


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {data[:300]!r}")
    return json.loads(data)


def chat_load(port, stop, n_clients, done):
    """n_clients generating 64 tokens at a time on the same server (completions: synthetic files have no chat
    template), streamed; done[0] counts the tokens they received, so a server that refuses them shows it."""
    def one():
        while not stop.is_set():
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
                c.request("POST", "/v1/completions", body=json.dumps(
                    {"prompt": "Once upon a time, in a land far away,", "max_tokens": 64, "temperature": 0,
                     "ignore_eos": True, "stream": True}), headers={"Content-Type": "application/json"})
                r = c.getresponse()
                if r.status != 200:
                    r.read()
                    time.sleep(0.5)
                    continue
                for line in r:
                    if line.startswith(b"data: {"):
                        done[0] += 1
                c.close()
            except Exception:  # noqa: BLE001 - a load thread: errors show up in the token count
                time.sleep(0.1)
    threads = [threading.Thread(target=one, daemon=True) for _ in range(n_clients)]
    for t in threads:
        t.start()
    return threads


def measure(port, inputs, batch):
    t0 = time.perf_counter()
    tokens = 0
    for i in range(0, len(inputs), batch):
        out = post(port, "/v1/embeddings", {"input": inputs[i:i + batch], "encoding_format": "float"})
        assert len(out["data"]) == len(inputs[i:i + batch])
        tokens += out.get("usage", {}).get("prompt_tokens", 0)
    measure.tokens_per_input = tokens / len(inputs)
    return len(inputs) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--llama-server")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--n", type=int, default=64, help="inputs per measurement")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pooling", choices=["mean", "cls", "last"])
    ap.add_argument("--chat-clients", type=int, default=0)
    ap.add_argument("--slot-ctx", type=int, default=1024, help="llama-server: context of each of its 16 slots")
    a = ap.parse_args()

    servers = {}
    port = free_port()
    cmd = [os.path.join(ROOT, "build", "cachet"), "serve", "-m", a.model, "--port", str(port), "-t", str(a.threads),
           "--parallel", "64"] + (["--pooling", a.pooling] if a.pooling else [])
    servers["cachet"] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port)
    if a.llama_server:
        port = free_port()
        cmd = [a.llama_server, "-m", a.model, "--port", str(port), "-t", str(a.threads), "-tb", str(a.threads),
               "--embeddings", "--parallel", "16", "-c", str(16 * a.slot_ctx), "-b", "4096", "-ub", "4096"]
        cmd += ["--pooling", a.pooling] if a.pooling else []
        servers["llama-server"] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port)
    try:
        for proc, p in servers.values():
            wait_ready(p, proc, "/health")
        results = {name: {1: [], 32: []} for name in servers}
        streamed = {name: [] for name in servers}  # chat tokens per second received while embedding
        for rep in range(a.reps + 1):  # the first round warms up
            for name, (_, p) in servers.items():  # the engines alternate
                stop, done = threading.Event(), [0]
                load = chat_load(p, stop, a.chat_clients, done) if a.chat_clients else []
                t0 = time.perf_counter()
                for batch in (1, 32):
                    # New inputs for each measurement (the same for both engines): a prefix cache must not turn
                    # a repeat into a near no-op (causal last-token pooling reuses every block but the last).
                    rate = measure(p, texts(a.n, a.tokens, 1000 * rep + batch), batch)
                    if rep > 0:
                        results[name][batch].append(rate)
                if rep > 0 and load:
                    streamed[name].append(done[0] / (time.perf_counter() - t0))
                stop.set()
                for t in load:
                    t.join(timeout=120)
        out = {"model": os.path.basename(a.model), "threads": a.threads, "words": a.tokens,
               "tokens_per_input": round(measure.tokens_per_input, 1), "chat_clients": a.chat_clients}
        for name, r in results.items():
            for batch, v in r.items():
                out[f"{name}_batch{batch}_per_s"] = round(statistics.median(v), 2)
            if streamed[name]:
                out[f"{name}_chat_tok_per_s"] = round(statistics.median(streamed[name]), 1)
        if "llama-server" in results:
            for batch in (1, 32):
                out[f"ratio_batch{batch}"] = round(out[f"cachet_batch{batch}_per_s"] /
                                                   out[f"llama-server_batch{batch}_per_s"], 3)
        print(json.dumps(out))
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
