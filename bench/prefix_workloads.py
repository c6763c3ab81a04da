#!/usr/bin/env python3
"""Issue #16's three prefix-sharing workloads, against cachet (prefix cache on and off) and llama.cpp's own
llama-server (scripts/setup_llamacpp.sh; `--parallel` equal to our concurrency, its per-slot prompt cache on),
one engine after the other on the same model file and thread count. Streaming /v1/chat/completions over
loopback; reports wall time, completion tokens/s, requests/s and TTFT p50/p99 per engine and workload.

  (a) system: one long shared system prompt (~1,500 tokens) + 64 different questions, 16 clients
  (b) chat:   32 users x 8 turns, each turn resending the whole conversation so far
  (c) fewshot: 5-shot prompts whose examples are shared, 64 different queries
  (d) nothing shared: 64 distinct ~250-token plain completions (what the tree costs when nothing hits)

    .venv/bin/python bench/prefix_workloads.py [-m MODEL] [--workloads a,b,c] [--engines on,off,llama]
        [--llama-server ~/.cache/cachet/llama.cpp/native/bin/llama-server] [-t 2]
"""
import argparse
import http.client
import json
import os
import pathlib
import random
import socket
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

WORDS = ("river mountain lantern orchard harbor meadow copper violet thunder marble falcon ember willow canyon "
         "glacier saffron beacon quartz tundra prairie").split()


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))] if v else float("nan")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server exited: " + (proc.stderr.read() if proc.stderr else ""))
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server not ready")


MODEL_ID = None  # sent as "model" when set (a router routes by it: bench/replicas_bench.py)


def chat_stream(port, messages, max_tokens, usage_out=None):
    """One streamed chat completion (a str instead of messages: a plain completion of that prompt, no template):
    (ttft seconds, completion tokens, reply text); the final usage object goes to usage_out (a dict) if given."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}  # llama-server's cache_prompt is on by default
    if MODEL_ID:
        body["model"] = MODEL_ID
    if isinstance(messages, str):
        body["prompt"] = messages
    else:
        body["messages"] = messages
    t0 = time.time()
    c.request("POST", "/v1/completions" if isinstance(messages, str) else "/v1/chat/completions",
              body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    ttft, n, text = None, 0, []
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for ch in ev.get("choices", []):
            piece = (ch.get("delta") or {}).get("content") if "delta" in ch else ch.get("text")
            if piece:
                if ttft is None:
                    ttft = time.time() - t0
                text.append(piece)
        if ev.get("usage"):
            n = ev["usage"]["completion_tokens"]
            if usage_out is not None:
                usage_out.update(ev["usage"])
    c.close()
    return (ttft if ttft is not None else time.time() - t0), n, "".join(text)


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n)) + "."


def workload(name):
    """A list of 'sessions'; each session is a list of turns run in order by one client: (messages fn, tokens)."""
    rng = random.Random(16)
    if name == "a":
        system = "You are a helpful assistant for a travel company. " + " ".join(sentence(rng, 12) for _ in range(110))
        qs = [f"Question {i}: what should I pack for a trip to the {rng.choice(WORDS)} {rng.choice(WORDS)}?"
              for i in range(64)]
        return [[([{"role": "system", "content": system}, {"role": "user", "content": q}], 16)] for q in qs], 16
    if name == "b":
        sessions = []
        for u in range(32):
            turns = [sentence(rng, 20) + " Tell me more." for _ in range(8)]
            sessions.append([("chat", t) for t in turns])
        return sessions, 16
    if name == "c":
        shots = "\n\n".join(f"Input: {sentence(rng, 25)}\nOutput: {rng.choice(WORDS)}" for _ in range(5))
        qs = [f"{shots}\n\nInput: {sentence(rng, 25)}\nOutput:" for _ in range(64)]
        return [[([{"role": "user", "content": q}], 8)] for q in qs], 16
    if name == "d":  # nothing shared: plain completions of distinct random prompts (the tree's cost at 0% hits)
        return [[(f"{i} " + " ".join(sentence(rng, 12) for _ in range(20)), 32)] for i in range(64)], 32
    raise ValueError(name)


def run(port, sessions, clients, max_tokens):
    ttfts, tokens, lock = [], [0], threading.Lock()
    queue = list(range(len(sessions)))

    errors = []

    def worker():
        try:
            work()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    def work():
        while True:
            with lock:
                if not queue:
                    return
                i = queue.pop(0)
            history = []
            for turn in sessions[i]:
                if turn[0] == "chat":  # a chat turn: the whole conversation so far plus the new message
                    history.append({"role": "user", "content": turn[1]})
                    ttft, n, reply = chat_stream(port, history, max_tokens)
                    history.append({"role": "assistant", "content": reply})
                else:
                    ttft, n, _ = chat_stream(port, turn[0], turn[1])
                with lock:
                    ttfts.append(ttft)
                    tokens[0] += n

    t0 = time.time()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]}")
    return {"wall_s": wall, "requests": len(ttfts), "completion_tokens": tokens[0],
            "tok_s": tokens[0] / wall, "req_s": len(ttfts) / wall,
            "ttft_p50_s": pct(ttfts, 50), "ttft_p99_s": pct(ttfts, 99)}


def start(engine, a, clients):
    port = free_port()
    if engine in ("on", "off"):
        cmd = [str(ROOT / "build" / "cachet"), "serve", "-m", a.model, "--port", str(port), "-t", str(a.threads),
               "--parallel", str(clients), "--kv-memory", "1GiB", "-c", "4096"]
        if engine == "off":
            cmd.append("--no-prefix-cache")
    else:
        cmd = [a.llama_server, "-m", a.model, "--port", str(port), "-t", str(a.threads), "--parallel", str(clients),
               "-c", str(4096 * clients), "--log-disable"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_ready(port, proc)
    return port, proc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--workloads", default="a,b,c,d")
    ap.add_argument("--engines", default="on,off,llama")
    ap.add_argument("--llama-server", default=str(pathlib.Path.home() / ".cache/cachet/llama.cpp/native/bin/llama-server"))
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    if a.model is None:
        a.model = subprocess.run([str(ROOT / ".venv/bin/python"), str(ROOT / "scripts/fetch_model.py")], check=True,
                                 capture_output=True, text=True).stdout.strip()
    names = {"on": "cachet (prefix cache)", "off": "cachet --no-prefix-cache", "llama": "llama-server"}
    rows = []
    for w in a.workloads.split(","):
        sessions, max_tokens = workload(w)
        clients = {"a": 16, "b": 32, "c": 16, "d": 16}[w]
        for e in a.engines.split(","):
            port, proc = start(e, a, clients)
            try:
                res = run(port, sessions, clients, max_tokens)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
            res.update({"workload": w, "engine": names[e], "clients": clients})
            print(json.dumps(res), flush=True)
            rows.append(res)
    print("\n| workload | engine | clients | wall s | completion tok/s | req/s | TTFT p50 s | TTFT p99 s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['engine']} | {r['clients']} | {r['wall_s']:.1f} | {r['tok_s']:.1f} | "
              f"{r['req_s']:.2f} | {r['ttft_p50_s']:.2f} | {r['ttft_p99_s']:.2f} |")


if __name__ == "__main__":
    main()
