#!/usr/bin/env python3
"""Soak: `cachet serve` under mixed load for a long time, resident memory sampled every 10 s.

Clients loop over a mix of requests: streamed and plain chat, completions with n > 1, streams aborted
mid-way (the connection closed), bad requests (malformed JSON, out-of-range fields, 100k-deep nesting), long
prompts (~1,500 tokens) and short ones, and hostile per-request chat templates. Writes the RSS curve as CSV
and PNG and a summary (throughput, status counts, RSS after warm-up vs at the end) as JSON:

    .venv/bin/python bench/soak.py --minutes 60 --clients 12 --out bench/results/DATE/soak
"""
import argparse
import collections
import http.client
import json
import pathlib
import random
import re
import socket
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import loadgen  # noqa: E402

LONG = ("The quick brown fox jumps over the lazy dog while the committee reviews the quarterly figures. " * 75)
HOSTILE_TEMPLATES = [
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{{ 'x' * 10**9 }}",
    "{% set l = [] %}{% set _ = l.append(l) %}{{ l }}",
]


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def smaps(pid):
    """Resident KiB per mapping, keyed by (start address, name): where a growth lives (heap, an anonymous
    mapping such as a thread arena or the KV pool, a file such as the model, a thread stack)."""
    out, key = {}, None
    try:
        for line in open(f"/proc/{pid}/smaps"):
            head = line.split()
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                key = (head[0].split("-")[0], head[5] if len(head) > 5 else "[anon]")
            elif head and head[0] == "Rss:" and key:
                out[key] = out.get(key, 0) + int(head[1])
    except OSError:
        pass
    return out


def by_kind(maps):
    kinds = collections.Counter()
    for (_, name), kib in maps.items():
        kind = ("heap" if name == "[heap]" else "anon" if name == "[anon]" else
                "stack" if name.startswith("[stack") else "other" if name.startswith("[") else "file")
        kinds[kind] += kib
    return kinds


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.status = collections.Counter()
        self.kinds = collections.Counter()
        self.tokens = 0
        self.failures = []  # unexpected outcomes (a 5xx, a dropped connection, a 200 where a 400 was due)

    def add(self, kind, status, tokens=0, unexpected=None):
        with self.lock:
            self.kinds[kind] += 1
            self.status[str(status)] += 1
            self.tokens += tokens
            if unexpected:
                self.failures.append(f"{kind}: {unexpected}")


def one_request(port, rng, stats):
    kind = rng.choices(["chat_stream", "chat", "completion_n", "abort", "bad", "long", "template"],
                       weights=[25, 20, 10, 10, 15, 10, 10])[0]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    msgs = [{"role": "user", "content": rng.choice(["Tell me a joke.", "What is 2+2?", "Name three colors."])}]
    try:
        if kind in ("chat_stream", "abort"):
            body = {"messages": msgs, "max_tokens": 48, "stream": True, "temperature": 0.8, "seed": rng.randrange(1 << 30)}
            c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            n = 0
            for line in r:
                if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                    n += 1
                    if kind == "abort" and n >= 3:
                        break  # hang up mid-stream
            stats.add(kind, r.status, n, None if r.status == 200 else f"status {r.status}")
        elif kind == "bad":
            raw = rng.choice(['{"messages": [', '{"messages": ' + "[" * 100000 + "]" * 100000 + "}",
                              json.dumps({"messages": msgs, "temperature": 7}), json.dumps({"prompt": "x", "n": 99}),
                              json.dumps({"messages": msgs, "max_tokens": 1e300})])
            c.request("POST", "/v1/chat/completions" if "messages" in raw else "/v1/completions", raw,
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            stats.add(kind, r.status, 0, None if r.status == 400 else f"status {r.status} for a bad request")
        elif kind == "template":
            body = {"messages": msgs, "max_tokens": 8, "chat_template": rng.choice(HOSTILE_TEMPLATES)}
            c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            stats.add(kind, r.status, 0, None if r.status == 400 else f"status {r.status} for a hostile template")
        else:
            if kind == "completion_n":
                path, body = "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 32, "n": 3, "temperature": 1.0}
            elif kind == "long":
                path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": LONG + " Summarize."}],
                                                      "max_tokens": 16}
            else:
                path, body = "/v1/chat/completions", {"messages": msgs, "max_tokens": 32}
            c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            payload = json.loads(r.read())
            toks = payload.get("usage", {}).get("completion_tokens", 0) if r.status == 200 else 0
            stats.add(kind, r.status, toks, None if r.status == 200 else f"status {r.status}: {payload}")
    except (OSError, http.client.HTTPException, ValueError) as e:
        stats.add(kind, "exception", 0, f"{type(e).__name__}: {e}")
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(pathlib.Path.home() / ".cache/cachet/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True, help="path prefix of the CSV, PNG and JSON")
    ap.add_argument("--wrap", default="", help="a command put before the server's, e.g. 'heaptrack -o /tmp/ht'")
    ap.add_argument("--serve-args", default="", help="extra arguments for cachet serve")
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    port = loadgen.free_port()
    proc = subprocess.Popen(a.wrap.split() + [str(ROOT / "build/cachet"), "serve", "-m", a.model, "--port", str(port),
                             "-t", str(a.threads), "--parallel", "16", "--trust-request-chat-template"] +
                            a.serve_args.split(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    loadgen.wait_ready(port, proc, "/health")
    stats = Stats()
    stop = threading.Event()
    end = time.time() + 60 * a.minutes

    def client(k):
        rng = random.Random(k)
        while time.time() < end and not stop.is_set():
            one_request(port, rng, stats)

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(a.clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    samples, kinds, maps_warm = [], [], None
    while time.time() < end:
        samples.append((time.time() - t0, rss_kib(proc.pid)))
        maps = smaps(proc.pid)
        kinds.append(by_kind(maps))
        if maps_warm is None and samples[-1][0] >= min(300, 15 * a.minutes):
            maps_warm = maps
        maps_end = maps
        if proc.poll() is not None:
            stats.failures.append(f"server exited with {proc.returncode}")
            break
        time.sleep(10)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    wall = time.time() - t0
    alive = proc.poll() is None
    proc.terminate()
    proc.wait(timeout=60)

    with open(f"{out}.csv", "w") as f:
        f.write("seconds,rss_kib,heap_kib,anon_kib,file_kib,stack_kib\n")
        for (s, r), k in zip(samples, kinds):
            f.write(f"{s:.1f},{r},{k['heap']},{k['anon']},{k['file']},{k['stack']}\n")
    # The mappings whose resident size grew most from warm-up to the end, and those that came or went.
    growth = []
    if maps_warm is not None:
        for key in set(maps_warm) | set(maps_end):
            d = maps_end.get(key, 0) - maps_warm.get(key, 0)
            if d:
                growth.append((d, key))
        growth.sort(reverse=True)
    warm = [r for s, r in samples if s >= min(300, wall / 4)]
    summary = {"minutes": wall / 60, "clients": a.clients, "requests": sum(stats.kinds.values()),
               "requests_per_s": sum(stats.kinds.values()) / wall, "tokens_per_s": stats.tokens / wall,
               "by_kind": dict(stats.kinds), "by_status": dict(stats.status),
               "unexpected": len(stats.failures), "unexpected_first": stats.failures[:10], "server_alive": alive,
               "rss_mib_after_warmup": warm[0] / 1024 if warm else None, "rss_mib_end": samples[-1][1] / 1024,
               "rss_mib_max_after_warmup": max(warm) / 1024 if warm else None,
               "rss_mib_by_kind_end": {k: v / 1024 for k, v in kinds[-1].items()} if kinds else None,
               "mapping_growth_kib_top": [[d, f"{k[0]} {k[1]}"] for d, k in growth[:8]],
               "mapping_growth_kib_total": sum(d for d, _ in growth)}
    pathlib.Path(f"{out}.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 3.5))
        ax.plot([s / 60 for s, _ in samples], [r / 1024 for _, r in samples])
        ax.set_xlabel("minutes")
        ax.set_ylabel("resident memory (MiB)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"cachet serve soak: {summary['requests']} requests, {a.clients} clients, "
                     f"{summary['unexpected']} unexpected")
        fig.tight_layout()
        fig.savefig(f"{out}.png", dpi=100)
    except ImportError:
        print("matplotlib missing: no PNG (bash scripts/setup_bench.sh installs it)", file=sys.stderr)
    return 0 if alive and not stats.failures else 1


if __name__ == "__main__":
    sys.exit(main())
