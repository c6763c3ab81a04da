#!/usr/bin/env python3
"""Replicas behind SGLang's router (docs/replicas.md) on a prefix-heavy workload, against one replica with all the
cores: bench/prefix_workloads.py's (b) 32 users x 8 chat turns, each resending the conversation so far, and (a) one
long shared system prompt. Configurations, alternating, medians of --runs:
  one:         1 `cachet serve -t 2`, clients straight to it
  cache_aware: 2 `cachet serve -t 1` behind `sglang-router --policy cache_aware`
  round_robin: the same 2 behind `--policy round_robin` (what ignoring the caches costs)
    .venv/bin/python bench/replicas_bench.py [--workloads b,a] [--runs 3] [--out FILE.md]"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import prefix_workloads as pw  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def serve(model, threads, clients):
    port = pw.free_port()
    proc = subprocess.Popen([str(ROOT / "build" / "cachet"), "serve", "-m", model, "--port", str(port), "-t",
                             str(threads), "--parallel", str(clients), "--kv-memory", "1GiB", "-c", "4096"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pw.wait_ready(port, proc)
    return port, proc


def router(ports, policy):
    port = pw.free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port",
                             str(port), "--policy", policy, "--log-level", "warn", "--prometheus-port",
                             str(pw.free_port()), "--worker-urls", *[f"http://127.0.0.1:{p}" for p in ports]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            pw.chat_stream(port, [{"role": "user", "content": "hi"}], 1)
            return port, proc
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.5)
    raise RuntimeError("router did not come up")


def one_run(config, model, sessions, clients, max_tokens):
    procs = []
    try:
        if config == "one":
            port, p = serve(model, 2, clients)
            procs.append(p)
        else:
            ports = []
            for _ in range(2):
                rp, p = serve(model, 1, clients)
                ports.append(rp)
                procs.append(p)
            port, p = router(ports, config)
            procs.append(p)
        return pw.run(port, sessions, clients, max_tokens)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--workloads", default="b,a")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    model = a.model or subprocess.run([str(ROOT / ".venv/bin/python"), str(ROOT / "scripts/fetch_model.py")],
                                      check=True, capture_output=True, text=True).stdout.strip()
    pw.MODEL_ID = pathlib.Path(model).name.removesuffix(".gguf")  # the id cachet serves it under
    configs = ["one", "cache_aware", "round_robin"]
    lines = ["| workload | configuration | completion tok/s | req/s | TTFT p50 s | TTFT p99 s |", "|---|---|---|---|---|---|"]
    for w in a.workloads.split(","):
        sessions, max_tokens = pw.workload(w)
        clients = {"a": 16, "b": 32, "c": 16, "d": 16}[w]
        res = {c: [] for c in configs}
        for _ in range(a.runs):
            for c in configs:
                r = one_run(c, model, sessions, clients, max_tokens)
                print(json.dumps({"workload": w, "config": c, **r}), flush=True)
                res[c].append(r)
        for c in configs:
            m = {k: statistics.median(r[k] for r in res[c]) for k in ("tok_s", "req_s", "ttft_p50_s", "ttft_p99_s")}
            lines.append(f"| {w} | {c} | {m['tok_s']:.1f} | {m['req_s']:.2f} | {m['ttft_p50_s']:.2f} | "
                         f"{m['ttft_p99_s']:.2f} |")
    text = (f"Replicas on {os.cpu_count()} cores, {pathlib.Path(model).name}, medians of {a.runs} "
            f"(`bench/replicas_bench.py`):\n\n" + "\n".join(lines) + "\n")
    print(text)
    if a.out:
        pathlib.Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
