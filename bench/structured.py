"""Decode throughput with constraints on and off, at 1 and 16 clients, from `cachet serve`, side by side with
llama.cpp's llama-server (its response_format json_schema; same file, threads and slots) when --llama-server is
given. Each request asks for an object of one of the API-style schemas tests/python/test_structured.py generates
(constrained) or the same prompt free with ignore_eos (free); throughput is completion tokens over wall time of
all requests, medians of --reps rounds, engines alternating; the constrained/free ratio is the median of each
round's back-to-back pair. Prints one JSON line.

  python3 bench/structured.py -m FILE.gguf [--llama-server ~/.cache/cachet/llama.cpp/native/bin/llama-server]
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from loadgen import free_port, wait_ready  # noqa: E402
from test_structured import generated_schemas  # noqa: E402


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"{r.status}: {data[:300]!r}")
    return json.loads(data)


def measure(port, schemas, clients, constrained, max_tokens):
    def one(i):
        body = {"messages": [{"role": "user", "content": f"Fill in record {i} as JSON."}], "max_tokens": max_tokens,
                "temperature": 0.7, "seed": i}
        if constrained:
            # A list of at least 40 records: the grammar never lets the output end before max_tokens, so both
            # kinds generate the same number of tokens per request.
            item = dict(schemas[i])
            defs = item.pop("$defs", None)
            schema = {"type": "array", "items": item, "minItems": 40}
            if defs:
                schema["$defs"] = defs
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
        else:
            body["ignore_eos"] = True  # llama-server's field has the same name
        return post(port, body)["usage"]["completion_tokens"]

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as ex:
        tokens = sum(ex.map(one, range(len(schemas))))
    return tokens / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--llama-server")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=32, help="requests per measurement")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()

    # Schemas llama-server's converter also takes (no formats it lacks): the generated ones without format.
    schemas = [s for _, s, _ in generated_schemas(200, seed=11) if "format" not in json.dumps(s)][:a.n]
    servers = {}
    port = free_port()
    servers["cachet"] = (subprocess.Popen(
        [os.path.join(ROOT, "build", "cachet"), "serve", "-m", a.model, "--port", str(port), "-t", str(a.threads),
         "--parallel", "16"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port)
    if a.llama_server:
        port = free_port()
        servers["llama-server"] = (subprocess.Popen(
            [a.llama_server, "-m", a.model, "--port", str(port), "-t", str(a.threads), "-tb", str(a.threads),
             "--parallel", "16", "-c", str(16 * 1024), "--jinja"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port)
    try:
        for proc, p in servers.values():
            wait_ready(p, proc, "/health")
        res = {(n, c, k): [] for n in servers for c in (1, 16) for k in ("free", "constrained")}
        for rep in range(a.reps + 1):  # the first round warms up (and compiles every schema once)
            for name, (_, p) in servers.items():
                for clients in (1, 16):
                    # Which kind runs first alternates with the round, so a drift of the host's speed within a
                    # round does not lean on one side of the ratio.
                    for kind in (("free", "constrained") if rep % 2 else ("constrained", "free")):
                        rate = measure(p, schemas, clients, kind == "constrained", a.max_tokens)
                        if rep > 0:
                            res[(name, clients, kind)].append(rate)
        out = {"model": os.path.basename(a.model), "threads": a.threads, "requests": len(schemas),
               "max_tokens": a.max_tokens}
        for (name, clients, kind), v in res.items():
            out[f"{name}_c{clients}_{kind}_tok_s"] = round(statistics.median(v), 1)
        for name in servers:
            for clients in (1, 16):
                # The ratio of each round's pair (run back to back), then the median: the host's speed drifts
                # between rounds far more than within a pair.
                pairs = [c / f for c, f in zip(res[(name, clients, "constrained")], res[(name, clients, "free")])]
                out[f"{name}_c{clients}_constrained_over_free"] = round(statistics.median(pairs), 3)
                out[f"{name}_c{clients}_constrained_over_free_range"] = [round(min(pairs), 3), round(max(pairs), 3)]
        if "llama-server" in servers:
            for clients in (1, 16):
                out[f"constrained_c{clients}_cachet_over_llama"] = round(
                    out[f"cachet_c{clients}_constrained_tok_s"] / out[f"llama-server_c{clients}_constrained_tok_s"], 3)
        print(json.dumps(out))
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
