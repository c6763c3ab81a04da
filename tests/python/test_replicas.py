"""Replicas behind an existing cache-aware router (docs/replicas.md): two `cachet serve` processes behind SGLang's
router (PyPI sglang-router, policy cache_aware). A multi-turn chat's later turns must land on the replica that
served its earlier turns (its prompt tokens come from that replica's prefix cache), and killing one replica under
load must lose no request that had not started there."""
import concurrent.futures as cf
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import loadgen  # noqa: E402


def start_replica(cachet_bin, model):
    port = loadgen.free_port()
    proc = subprocess.Popen([cachet_bin, "serve", "-m", model, "--port", str(port), "-t", "1", "--parallel", "8"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    loadgen.wait_ready(port, proc, "/health")
    return proc, port


def start_router(workers):
    port = loadgen.free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port",
                             str(port), "--policy", "cache_aware", "--worker-urls",
                             *[f"http://127.0.0.1:{p}" for p in workers], "--log-level", "warn",
                             "--prometheus-port", str(loadgen.free_port())],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.5)
    raise AssertionError("the router did not come up")


MODEL = "SmolLM2-135M-Instruct.Q4_1"  # the id the replicas serve (the file name); the router routes by it


def chat(port, messages, max_tokens=16):
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def served(port):
    """Generation requests this replica finished (its own /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith("cachet_request_duration_seconds_count "):
            return int(float(line.split()[-1]))
    return 0


@pytest.fixture
def fleet(cachet_bin, default_model):
    import importlib.util
    assert importlib.util.find_spec("sglang_router"), "sglang-router missing: scripts/setup.sh installs it"
    replicas = [start_replica(cachet_bin, default_model) for _ in range(2)]
    router = None
    try:
        router = start_router([p for _, p in replicas])
        yield replicas, router
    finally:
        for proc, _ in replicas + ([router] if router else []):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def test_multi_turn_chats_stick_to_their_replica(fleet):
    replicas, (_, rport) = fleet
    ports = [p for _, p in replicas]
    topics = ["You are a careful botanist. Explain plants in detail and cite the parts of a flower.",
              "You are a terse sea captain. Speak only of ships, knots and tides on the open ocean."]
    convs = [[{"role": "system", "content": t * 4}] for t in topics]
    where = [[], []]
    for turn in range(3):
        for c, conv in enumerate(convs):
            conv.append({"role": "user", "content": f"Question {turn}: tell me more, please."})
            before = [served(p) for p in ports]
            out = chat(rport, conv)
            after = [served(p) for p in ports]
            hit = [i for i in range(2) if after[i] > before[i]]
            assert len(hit) == 1, (before, after)
            where[c].append((hit[0], out["usage"]["prompt_tokens_details"]["cached_tokens"],
                             out["usage"]["prompt_tokens"]))
            conv.append({"role": "assistant", "content": out["choices"][0]["message"]["content"]})
    print("\n(replica, cached tokens, prompt tokens) per turn:", where)
    for c in range(2):
        first = where[c][0][0]
        assert all(r == first for r, _, _ in where[c]), where
        for _, cached, prompt in where[c][1:]:  # later turns: most of the prompt from that replica's cache
            assert cached >= prompt // 2, where


def test_killing_a_replica_loses_no_request_that_had_not_started(fleet):
    replicas, (_, rport) = fleet
    (victim, vport), (_, sport) = replicas
    results = []

    def one(i):
        t0 = time.time()
        try:
            out = chat(rport, [{"role": "user", "content": f"Request {i}: name a color and a number."}], 24)
            return ("ok", t0, time.time(), out)
        except urllib.error.HTTPError as e:
            return (f"http {e.code}", t0, time.time(), e.read().decode()[:300])
        except OSError as e:
            return (f"error {e}", t0, time.time(), None)

    with cf.ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(one, i) for i in range(48)]
        time.sleep(3)
        victim_done = served(vport)
        assert victim_done > 0, "the router sent nothing to the replica about to be killed"
        kill_at = time.time()
        victim.send_signal(signal.SIGKILL)
        results = [f.result() for f in futs]
    failed = [r for r in results if r[0] != "ok"]
    started_after = [r for r in results if r[1] > kill_at]
    # Every request sent after the kill succeeded (the router took the dead replica out or retried).
    assert all(r[0] == "ok" for r in started_after), [r[:2] for r in started_after if r[0] != "ok"]
    # What was lost: at most the requests the killed replica was running (--parallel 8).
    assert len(failed) <= 8, failed
    print(f"\nreplica killed under load after answering {victim_done}: {len(results)} requests, {len(failed)} failed "
          f"(in flight on the killed replica), {len(started_after)} sent after the kill all answered")
