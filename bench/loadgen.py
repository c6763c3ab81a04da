#!/usr/bin/env python3
"""Closed-loop streaming load against an OpenAI-compatible /v1/completions endpoint.

Each of N clients keeps one keep-alive connection and streams requests back to back for S seconds, recording the
time to first token, the time between tokens, the tokens per request and every error. Used by the server test
(must-show 4) and, with `--against-llamacpp`, to run the same load against cachet and llama.cpp's server
(PyPI llama-cpp-python[server]) on the same model and thread count, one after the other in one run:

    .venv/bin/python bench/loadgen.py --against-llamacpp -m MODEL.gguf --clients 64 --seconds 60

`--llama-server BIN` runs the same load against llama.cpp's own llama-server with one slot per client
(`--parallel` = clients, continuous batching), the peer a team would actually deploy.
"""
import argparse
import http.client
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))] if v else float("nan")


class Load:
    """Results of one load run; `threads` are still running until `join()`."""

    def __init__(self):
        self.ttft, self.tbt, self.tokens, self.errors, self.status = [], [], [], [], []
        self.reconnects = 0  # requests resent on a new connection after the server closed a kept-alive one
        self.t0 = time.time()
        self.wall = 0.0
        self.threads = []

    def join(self):
        for t in self.threads:
            t.join()
        self.wall = time.time() - self.t0

    def summary(self):
        return {"requests": len(self.tokens), "errors": len(self.errors) + len(self.status), "reconnects": self.reconnects,
                "tok_per_s": sum(self.tokens) / self.wall if self.wall else float("nan"),
                "ttft_p50_ms": 1e3 * pct(self.ttft, 50), "ttft_p99_ms": 1e3 * pct(self.ttft, 99),
                "tbt_p50_ms": 1e3 * pct(self.tbt, 50), "tbt_p99_ms": 1e3 * pct(self.tbt, 99)}


def start_load(port, model_id, clients, seconds, max_tokens=32, extra=None, stop_flag=None):
    """Starts `clients` threads streaming completions of `max_tokens` tokens. Tokens per request come from the
    usage chunk when the server sends one (`stream_options.include_usage`), else from the count of text chunks."""
    load = Load()
    body_extra = extra or {}

    def worker(k):
        end = time.time() + seconds
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)  # kept alive, as API clients do
        while time.time() < end and not (stop_flag and stop_flag.is_set()):
            t0 = time.time()
            body = json.dumps({"model": model_id, "prompt": f"Story number {k}:", "max_tokens": max_tokens,
                               "temperature": 0.8, "seed": k, "stream": True,
                               "stream_options": {"include_usage": True}, **body_extra})
            headers = {"Content-Type": "application/json"}
            try:
                c.request("POST", "/v1/completions", body=body, headers=headers)
                try:
                    r = c.getresponse()
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                    # The server closed the kept-alive connection after its last response (llama-server does so
                    # after every stream): nothing of this request was answered, so it goes again on a new
                    # connection, as HTTP clients do; the time counts (t0 stays).
                    load.reconnects += 1
                    c.close()
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
                    c.request("POST", "/v1/completions", body=body, headers=headers)
                    r = c.getresponse()
                if r.status != 200:
                    load.status.append(r.status)
                    r.read()
                    continue
                last, n, used = None, 0, None
                for line in r:
                    if not line.startswith(b"data: {"):
                        continue
                    ev = json.loads(line[6:])
                    if ev.get("usage"):
                        used = ev["usage"]["completion_tokens"]
                    if not ev.get("choices") or not ev["choices"][0].get("text"):
                        continue
                    now = time.time()
                    if last is None:
                        load.ttft.append(now - t0)
                    else:
                        load.tbt.append(now - last)
                    last = now
                    n += 1
                load.tokens.append(used if used is not None else n)
            except Exception as e:  # noqa: BLE001 - every failure counts as an error
                load.errors.append(repr(e))
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.close()

    load.threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in load.threads:
        t.start()
    return load


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, path, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "server exited"
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not become ready")


def metric_values(port, names):
    """The values of the named unlabelled series on the server's /metrics, None if it has not all of them."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
    except OSError:
        return None
    got = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            got[name] = float(value)
    return got if len(got) == len(names) else None


def engine_counters(port):
    """cachet's engine steps, the seconds spent in them and the tokens generated; None elsewhere."""
    return metric_values(port, ("cachet_engine_steps_total", "cachet_engine_step_seconds_total",
                                "cachet_generation_tokens_total"))


def run_server(cmd, port, ready_path, model_id, args, extra):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, proc, ready_path)
        # Warm-up: one request, so both servers have touched their weights before the clock starts.
        start_load(port, model_id, 1, 0.01, args.max_tokens, extra).join()
        before = engine_counters(port)
        load = start_load(port, model_id, args.clients, args.seconds, args.max_tokens, extra)
        load.join()
        after = engine_counters(port)
        if before and after:  # where a step's time goes: busy fraction, time and tokens a step
            steps = after["cachet_engine_steps_total"] - before["cachet_engine_steps_total"]
            busy = after["cachet_engine_step_seconds_total"] - before["cachet_engine_step_seconds_total"]
            tokens = after["cachet_generation_tokens_total"] - before["cachet_generation_tokens_total"]
            load.engine = {"busy": busy / load.wall, "ms_per_step": 1e3 * busy / max(steps, 1),
                           "tokens_per_step": tokens / max(steps, 1)}
        return load
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    root = pathlib.Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--cachet", default=str(root / "build" / "cachet"))
    ap.add_argument("--against-llamacpp", action="store_true", help="llama-cpp-python's server (one request at a time)")
    ap.add_argument("--llama-server", help="llama.cpp's own llama-server binary, run with --parallel = clients "
                    "(scripts/setup_llamacpp.sh builds it: ~/.cache/cachet/llama.cpp/native/bin/llama-server)")
    ap.add_argument("--port", type=int, default=0, help="load an already running server instead")
    args = ap.parse_args()
    model_id = pathlib.Path(args.model).stem
    # EOS is suppressed the same way for both servers: logit_bias on the model's end tokens, plus our ignore_eos.
    import gguf  # noqa: PLC0415 - only the bench needs it
    reader = gguf.GGUFReader(args.model)
    ends = set()
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"):
        f = reader.get_field(key)
        if f is not None:
            ends.add(int(f.parts[-1][0]))
    extra = {"logit_bias": {str(t): -100 for t in sorted(ends)}}

    results = {}
    if args.port:
        load = start_load(args.port, model_id, args.clients, args.seconds, args.max_tokens, extra)
        load.join()
        results["server"] = load
    else:
        port = free_port()
        results["cachet"] = run_server(
            [args.cachet, "serve", "-m", args.model, "--port", str(port), "-t", str(args.threads),
             "--parallel", str(args.clients)], port, "/health", model_id, args, {**extra, "ignore_eos": True})
        if args.against_llamacpp:
            port = free_port()
            results["llama.cpp"] = run_server(
                [sys.executable, "-m", "llama_cpp.server", "--model", args.model, "--model_alias", model_id,
                 "--port", str(port), "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
                 "--n_ctx", "2048", "--interrupt_requests", "False"], port, "/v1/models", model_id, args, extra)
        if args.llama_server:
            # One slot per client with room for a prompt and its tokens (-c is split across the slots);
            # continuous batching is llama-server's default.
            port = free_port()
            results["llama-server"] = run_server(
                [args.llama_server, "-m", args.model, "--alias", model_id, "--port", str(port), "-t", str(args.threads),
                 "-tb", str(args.threads), "--parallel", str(args.clients), "-c", str(args.clients * 256)],
                port, "/health", model_id, args, extra)
    print(f"{args.clients} streaming clients, {args.seconds:.0f} s each, {args.max_tokens} tokens per request, "
          f"{args.threads} threads, {pathlib.Path(args.model).name}")
    print(f"{'server':<10} {'requests':>8} {'errors':>6} {'tok/s':>8} {'TTFT p50':>9} {'TTFT p99':>9} "
          f"{'TBT p50':>8} {'TBT p99':>8}  (ms)")
    for name, load in results.items():
        s = load.summary()
        print(f"{name:<10} {s['requests']:>8} {s['errors']:>6} {s['tok_per_s']:>8.1f} {s['ttft_p50_ms']:>9.0f} "
              f"{s['ttft_p99_ms']:>9.0f} {s['tbt_p50_ms']:>8.1f} {s['tbt_p99_ms']:>8.1f}")
        if getattr(load, "engine", None):
            e = load.engine
            print(f"{'':<10} engine busy {e['busy']:.0%} of the wall time, {e['ms_per_step']:.1f} ms and "
                  f"{e['tokens_per_step']:.1f} generated tokens a step")
    for peer in ("llama.cpp", "llama-server"):
        if "cachet" not in results or peer not in results:
            continue
        a, b = results["cachet"].summary(), results[peer].summary()
        print(f"cachet / {peer}: throughput {a['tok_per_s'] / b['tok_per_s']:.2f}x, "
              f"TTFT p50 {b['ttft_p50_ms'] / a['ttft_p50_ms']:.2f}x lower, "
              f"TBT p99 {b['tbt_p99_ms'] / a['tbt_p99_ms']:.2f}x lower")
    if os.environ.get("LOADGEN_JSON"):
        with open(os.environ["LOADGEN_JSON"], "w") as f:
            json.dump({k: v.summary() for k, v in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
