"""`cachet serve` end to end: the real binary, the default model, the official openai client and raw HTTP."""
import ctypes
import errno
import http.client
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import openai
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import loadgen  # noqa: E402 - the load generator the server bench uses too

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
ROOT_DIR = pathlib.Path(__file__).resolve().parents[2]
QUESTION = "What is the capital of France? Answer in one sentence."


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, cachet_bin, model, *extra):
        self.port = free_port()
        self.proc = subprocess.Popen([cachet_bin, "serve", "-m", str(model), "--port", str(self.port), *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                status, _ = self.get("/health")
                if status == 200:
                    return
            except OSError:
                pass
            assert self.proc.poll() is None, self.proc.stderr.read()
            time.sleep(0.05)
        raise RuntimeError("server did not become ready")

    def request(self, method, path, body=None, headers=None, raw=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        payload = r.read()
        c.close()
        return r.status, payload, dict(r.getheaders())

    def get(self, path):
        status, payload, _ = self.request("GET", path)
        return status, payload

    def metrics(self, prefix="cachet_"):
        _, text = self.get("/metrics")
        out = {}
        for line in text.decode().splitlines():
            m = re.match(r"^(" + re.escape(prefix) + r"[a-z_]+(?:\{[^}]*\})?) (\S+)$", line)
            if m:
                out[m.group(1)] = float(m.group(2))
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def server(cachet_bin, default_model):
    s = Server(cachet_bin, default_model, "--parallel", "64", "--max-queue", "512")
    yield s
    s.stop()


def client(server):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="unused")


def test_openai_client_completions_and_chat_streamed_equals_not(server):
    c = client(server)
    assert [m.id for m in c.models.list().data] == [MODEL_ID]
    chat = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": QUESTION}],
                                     temperature=0, max_tokens=32)
    text = chat.choices[0].message.content
    assert "Paris" in text and chat.choices[0].finish_reason == "stop"
    assert chat.usage.prompt_tokens > 0 and chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens
    parts, usage = [], None
    for ev in c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": QUESTION}],
                                        temperature=0, max_tokens=32, stream=True,
                                        stream_options={"include_usage": True}):
        if ev.usage:
            usage = ev.usage
        for ch in ev.choices:
            parts.append(ch.delta.content or "")
    assert "".join(parts) == text
    assert usage.completion_tokens == chat.usage.completion_tokens

    comp = c.completions.create(model=MODEL_ID, prompt="The history of the Roman Empire", max_tokens=24,
                                temperature=0)
    assert comp.choices[0].finish_reason == "length" and comp.usage.completion_tokens == 24
    streamed = "".join(ev.choices[0].text for ev in c.completions.create(
        model=MODEL_ID, prompt="The history of the Roman Empire", max_tokens=24, temperature=0, stream=True))
    assert streamed == comp.choices[0].text


def test_sampling_fields_seed_n_stop_logprobs(server):
    c = client(server)
    kw = dict(model=MODEL_ID, prompt="Once upon a time", max_tokens=16, temperature=0.9, top_p=0.95)
    a = c.completions.create(seed=7, **kw).choices[0].text
    b = c.completions.create(seed=7, **kw).choices[0].text
    assert a == b
    many = c.completions.create(seed=7, n=3, extra_body={"top_k": 40, "min_p": 0.05}, **kw)
    assert sorted(ch.index for ch in many.choices) == [0, 1, 2]
    assert many.usage.completion_tokens == sum(16 for _ in many.choices)
    full = c.completions.create(model=MODEL_ID, prompt="The history of the Roman Empire", max_tokens=24,
                                temperature=0).choices[0].text
    stop = full[len(full) // 2:len(full) // 2 + 3]  # a stop string from the middle of the reply
    stopped = c.completions.create(model=MODEL_ID, prompt="The history of the Roman Empire", max_tokens=24,
                                   temperature=0, stop=["never-seen", stop])
    assert stopped.choices[0].finish_reason == "stop", (full, stop)
    assert stopped.choices[0].text == full[:full.index(stop)]
    lp = c.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=4, temperature=0, logprobs=3)
    l = lp.choices[0].logprobs
    assert len(l.tokens) == 4 and all(x <= 0 for x in l.token_logprobs) and all(len(t) == 3 for t in l.top_logprobs)
    ch = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                   temperature=0, logprobs=True, top_logprobs=2)
    assert len(ch.choices[0].logprobs.content) >= 1 and len(ch.choices[0].logprobs.content[0].top_logprobs) == 2
    ign = c.completions.create(model=MODEL_ID, prompt="Hi", max_tokens=40, temperature=0,
                               extra_body={"ignore_eos": True})
    assert ign.usage.completion_tokens == 40


GOOD = {"model": MODEL_ID, "prompt": "Hello", "max_tokens": 4}
BAD = [
    ("malformed JSON", "/v1/completions", b'{"model": ', 400, "invalid JSON"),
    ("body not an object", "/v1/completions", b"[1, 2]", 400, "JSON object"),
    ("invalid UTF-8", "/v1/completions", b'{"model": "x", "prompt": "\xff\xfe"}', 400, "invalid JSON"),
    ("model not a string", "/v1/completions", {"model": 7, "prompt": "Hi"}, 400, "'model'"),
    ("unknown model", "/v1/completions", {**GOOD, "model": "gpt-9"}, 404, "does not exist"),
    ("missing prompt", "/v1/completions", {"model": MODEL_ID}, 400, "'prompt'"),
    ("prompt wrong type", "/v1/completions", {**GOOD, "prompt": 12}, 400, "'prompt'"),
    ("two prompts", "/v1/completions", {**GOOD, "prompt": ["a", "b"]}, 400, "one prompt"),
    ("token id out of vocab", "/v1/completions", {**GOOD, "prompt": [1, 99999999]}, 400, "token ids"),
    ("max_tokens string", "/v1/completions", {**GOOD, "max_tokens": "10"}, 400, "'max_tokens' must be an integer"),
    ("max_tokens zero", "/v1/completions", {**GOOD, "max_tokens": 0}, 400, "'max_tokens' must be between"),
    ("temperature too high", "/v1/completions", {**GOOD, "temperature": 3}, 400, "'temperature' must be between"),
    ("temperature string", "/v1/completions", {**GOOD, "temperature": "hot"}, 400, "'temperature' must be a number"),
    ("top_p zero", "/v1/completions", {**GOOD, "top_p": 0}, 400, "'top_p'"),
    ("n too large", "/v1/completions", {**GOOD, "n": 100}, 400, "'n' must be between"),
    ("stop wrong type", "/v1/completions", {**GOOD, "stop": 5}, 400, "'stop'"),
    ("five stops", "/v1/completions", {**GOOD, "stop": ["a", "b", "c", "d", "e"]}, 400, "'stop'"),
    ("logit_bias bad key", "/v1/completions", {**GOOD, "logit_bias": {"abc": 1}}, 400, "logit_bias"),
    ("logit_bias out of range", "/v1/completions", {**GOOD, "logit_bias": {"5": 1000}}, 400, "[-100, 100]"),
    ("unknown field", "/v1/completions", {**GOOD, "frobnicate": 1}, 400, "Unrecognized request argument"),
    ("stream_options without stream", "/v1/completions", {**GOOD, "stream_options": {"include_usage": True}}, 400,
     "stream_options"),
    ("prompt + max_tokens over context", "/v1/completions", {**GOOD, "max_tokens": 9000}, 400,
     "maximum context length is 8192 tokens"),
    ("chat without messages", "/v1/chat/completions", {"model": MODEL_ID}, 400, "'messages'"),
    ("chat bad role", "/v1/chat/completions", {"model": MODEL_ID, "messages": [{"role": "wizard", "content": "x"}]},
     400, "unknown role"),
    ("chat content wrong type", "/v1/chat/completions", {"model": MODEL_ID, "messages": [{"role": "user",
                                                                                          "content": 5}]}, 400,
     "content"),
    ("top_logprobs without logprobs", "/v1/chat/completions",
     {"model": MODEL_ID, "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, 400, "top_logprobs"),
    ("huge body", "/v1/completions", b'{"model": "' + b"x" * (2 << 20) + b'"}', 413, "larger than"),
    ("unknown route", "/v1/nothing", GOOD, 404, "no route"),
    ("sglang extension asking for more", "/v1/completions", {**GOOD, "no_stop_trim": True}, 400,
     "'no_stop_trim': true is not supported"),
    ("sglang extension of the wrong type", "/v1/completions", {**GOOD, "skip_special_tokens": "yes"}, 400,
     "'skip_special_tokens' must be a boolean"),
    ("chat-only extension on completions", "/v1/completions", {**GOOD, "continue_final_message": False}, 400,
     "Unrecognized request argument"),
]


def test_sglang_router_fields_at_their_defaults_are_accepted(server):
    """What sglang-router (docs/replicas.md) writes into every request it forwards."""
    ext = {"no_stop_trim": False, "ignore_eos": False, "skip_special_tokens": True, "return_hidden_states": False}
    got, payload, _ = server.request("POST", "/v1/completions", {**GOOD, **ext, "echo": False})
    assert got == 200, payload
    chat = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 4,
            "logprobs": False, "continue_final_message": False, "separate_reasoning": True, "stream_reasoning": True,
            **ext}
    got, payload, _ = server.request("POST", "/v1/chat/completions", chat)
    assert got == 200, payload


@pytest.mark.parametrize("name,path,body,status,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_documented_errors(server, name, path, body, status, needle):
    raw = body if isinstance(body, bytes) else None
    got, payload, _ = server.request("POST", path, None if raw else body, raw=raw)
    assert got == status, payload
    err = json.loads(payload)["error"]
    assert needle in err["message"], err
    assert set(err) == {"message", "type", "param", "code"}
    # The server is still up and serving.
    ok, payload, _ = server.request("POST", "/v1/completions", GOOD)
    assert ok == 200, payload


def test_context_error_names_both_numbers(server):
    _, payload, _ = server.request("POST", "/v1/completions", {**GOOD, "max_tokens": 9000})
    msg = json.loads(payload)["error"]["message"]
    assert "8192" in msg and "9000" in msg and "9001" in msg  # limit, completion, total (1 prompt token + BOS)


def stream_tokens(port, body, close_after=None):
    """Streams a completion; returns (completion tokens from the usage chunk, finish reason), or
    (chunks seen, None) for a client that hangs up after `close_after` chunks."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/completions",
              body=json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    chunks, finish, used = 0, None, None
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            used = ev["usage"]["completion_tokens"]
        for ch in ev["choices"]:
            if ch["text"]:
                chunks += 1
            finish = ch["finish_reason"] or finish
        if close_after is not None and chunks >= close_after:
            r.close()
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
            return chunks, None
    c.close()
    return used, finish


def wait_idle(server, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = server.metrics()
        if m["cachet_requests_running"] == 0 and m["cachet_kv_blocks_used"] == 0 and m["cachet_http_in_flight"] == 0:
            return m
        time.sleep(0.1)
    return server.metrics()


def test_listen_backlog_takes_a_burst(server):
    # Debian's httplib listens with a backlog of 5; 100 clients connecting at once overflowed the accept queue and
    # one in a few hundred runs met a reset before its response. The server raises it to net.core.somaxconn.
    out = subprocess.run(["ss", "-Hltn", f"sport = :{server.port}"], capture_output=True, text=True, check=True)
    backlog = int(out.stdout.split()[2])  # State Recv-Q Send-Q ...: a listener's Send-Q is its backlog
    with open("/proc/sys/net/core/somaxconn") as f:
        assert backlog == min(int(f.read()), 65535) and backlog >= 128, out.stdout


def server_socket_nodelay(pid, client_sock):
    """TCP_NODELAY of the server's end of client_sock's connection, read through a copy of the server's descriptor
    (pidfd_getfd: the server is this process's child); None where the kernel does not allow it."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = libc.syscall(434, pid, 0)  # pidfd_open
    if pidfd < 0:
        return None
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    continue
            except OSError:
                continue
            fd = libc.syscall(438, pidfd, int(name), 0)  # pidfd_getfd
            if fd < 0:
                if ctypes.get_errno() == errno.EBADF:  # closed since it was listed
                    continue
                return None
            with socket.socket(fileno=fd) as s:
                try:
                    if s.getpeername() != client_sock.getsockname():
                        continue
                except OSError:
                    continue
                return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        os.close(pidfd)
    raise AssertionError("the server holds no socket connected to the client")


def test_small_writes_are_not_held_back(server):
    # With Nagle's algorithm a response's second small write (a stream's first event after the head, a body
    # after its head) waited for the client's delayed ACK: 40 ms on every keep-alive request. The accepted
    # sockets carry TCP_NODELAY.
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    c.request("GET", "/health")
    c.getresponse().read()
    nodelay = server_socket_nodelay(server.proc.pid, c.sock)
    c.close()
    if nodelay is None:
        pytest.skip("pidfd_getfd is not allowed here")
    assert nodelay != 0


def test_abort_mid_stream_frees_everything(server):
    body = {"model": MODEL_ID, "prompt": "Tell me a long story about a dragon.", "max_tokens": 48,
            "temperature": 0.8, "seed": 1, "ignore_eos": True}
    results = [None] * 100

    def run(i):
        close = 5 + i % 10 if i % 5 == 0 else None  # every fifth client hangs up after a few chunks
        results[i] = stream_tokens(server.port, {**body, "seed": i}, close)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    closed = [r for i, r in enumerate(results) if i % 5 == 0]
    kept = [r for i, r in enumerate(results) if i % 5 != 0]
    assert len(closed) == 20 and all(r[1] is None for r in closed)
    assert all(r == (48, "length") for r in kept), kept
    m = wait_idle(server)
    assert m["cachet_requests_running"] == 0 and m["cachet_requests_waiting"] == 0
    assert m["cachet_kv_blocks_used"] == m["cachet_prefix_cache_blocks"], m  # only what the prefix cache keeps


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def test_load_64_clients(server):
    seconds = float(os.environ.get("CACHET_LOAD_SECONDS", "120"))
    rss = []
    before = server.metrics()
    load = loadgen.start_load(server.port, MODEL_ID, 64, seconds, 32, {"ignore_eos": True})
    while any(t.is_alive() for t in load.threads):
        rss.append((time.time() - load.t0, rss_kib(server.proc.pid)))
        time.sleep(1)
    load.join()
    after = server.metrics()  # every response has ended: its tokens are counted
    steps = after["cachet_engine_steps_total"] - before["cachet_engine_steps_total"]
    busy = after["cachet_engine_step_seconds_total"] - before["cachet_engine_step_seconds_total"]
    generated = after["cachet_generation_tokens_total"] - before["cachet_generation_tokens_total"]
    # Every generated token came out of a step, at most one per running sequence (64) a step, and the steps' time
    # counter moved with them.
    assert generated == sum(load.tokens) and steps >= generated / 64, (generated, sum(load.tokens), steps)
    assert busy > 0, busy
    assert not load.errors and not load.status, (load.errors[:3], load.status[:3])
    assert load.tokens and all(n == 32 for n in load.tokens)
    # Resident memory flat after warm-up: the last third within 5% (+8 MiB) of the middle third's peak.
    warm = [r for t, r in rss if seconds / 3 <= t <= 2 * seconds / 3]
    late = [r for t, r in rss if t > 2 * seconds / 3]
    assert max(late) <= max(warm) * 1.05 + 8192, (max(warm), max(late))
    s = load.summary()
    report = (f"load: 64 clients, {seconds:.0f} s, {s['requests']} requests, {s['tok_per_s']:.1f} tok/s; "
              f"TTFT p50 {s['ttft_p50_ms']:.0f} ms p99 {s['ttft_p99_ms']:.0f} ms; TBT p50 {s['tbt_p50_ms']:.1f} ms "
              f"p99 {s['tbt_p99_ms']:.1f} ms; RSS {max(warm) // 1024} -> {max(late) // 1024} MiB; engine busy "
              f"{busy / load.wall:.0%} of the load's time, {1000 * busy / steps:.1f} ms and "
              f"{generated / steps:.1f} tokens a step")
    print(report)
    with open(os.environ.get("CACHET_LOAD_REPORT", "/tmp/cachet_load_report.txt"), "w") as f:
        f.write(report + "\n")


def test_api_key_and_cors(cachet_bin, default_model):
    s = Server(cachet_bin, default_model, "--api-key", "sekret", "--cors", "*")
    try:
        st, payload, _ = s.request("POST", "/v1/completions", GOOD)
        assert st == 401 and "API key" in json.loads(payload)["error"]["message"]
        st, _, _ = s.request("POST", "/v1/completions", GOOD, headers={"Authorization": "Bearer wrong"})
        assert st == 401
        st, _, h = s.request("POST", "/v1/completions", GOOD, headers={"Authorization": "Bearer sekret"})
        assert st == 200 and h.get("Access-Control-Allow-Origin") == "*"
        st, _, _ = s.request("GET", "/health")
        assert st == 200  # health and metrics need no key
    finally:
        s.stop()


def test_sigterm_drains_in_flight_and_refuses_new(cachet_bin, default_model):
    s = Server(cachet_bin, default_model)
    results = []

    def one():
        results.append(stream_tokens(s.port, {"model": MODEL_ID, "prompt": "Go on:", "max_tokens": 200,
                                              "temperature": 0.8, "seed": 5, "ignore_eos": True}))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # all 8 are streaming
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    st, payload, _ = s.request("POST", "/v1/completions", GOOD)
    assert st == 503, payload
    st, _ = s.get("/health")
    assert st == 503
    for t in threads:
        t.join()
    assert s.proc.wait(timeout=60) == 0
    assert results == [(200, "length")] * 8, results


def test_chat_page_is_served(server):
    st, payload = server.get("/")
    assert st == 200 and b"/v1/chat/completions" in payload and b"<script>" in payload


def test_chat_page_streams_in_headless_chromium(server, tmp_path):
    """Must-show 6: Debian's chromium, driven by selenium through Debian's chromedriver, types a question into the
    page at `/` and sees the reply grow chunk by chunk, then equal the non-streamed greedy answer; saves a
    screenshot (CACHET_SCREENSHOT, default build/chat_page.png)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1000,700"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        driver.get(f"http://127.0.0.1:{server.port}/")
        WebDriverWait(driver, 30).until(lambda d: "SmolLM2" in d.find_element(By.ID, "model").text)
        # Record every length the reply takes while it streams: a page that only painted the final text would
        # show one length.
        driver.execute_script("""
            window.__lengths = [];
            new MutationObserver(() => {
              const b = document.querySelector('.msg.assistant .body');
              if (b) window.__lengths.push(b.textContent.length);
            }).observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});""")
        box = driver.find_element(By.ID, "prompt")
        box.send_keys(QUESTION)
        driver.find_element(By.ID, "send").click()
        WebDriverWait(driver, 120).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done='1']"))
        reply = driver.find_element(By.CSS_SELECTOR, ".msg.assistant .body").text
        lengths = driver.execute_script("return window.__lengths")
        status = driver.find_element(By.ID, "status").text
        shot = os.environ.get("CACHET_SCREENSHOT", str(ROOT_DIR / "build" / "chat_page.png"))
        driver.save_screenshot(shot)
        print(f"chat page: {status!r}; reply {reply!r}; screenshot {shot}")
    finally:
        driver.quit()
    distinct = sorted(set(n for n in lengths if n > 0))
    assert len(distinct) >= 3, lengths  # it grew in several steps
    assert "first token" in status, status
    want = client(server).chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": QUESTION}], temperature=0, max_tokens=256)
    assert reply.strip() == want.choices[0].message.content.strip()
    assert "Paris" in reply


def test_prefix_cache_reports_cached_tokens_and_keeps_tenants_apart(cachet_bin, default_model):
    s = Server(cachet_bin, default_model, "--parallel", "8")
    try:
        system = "You are a careful assistant. " * 40  # a long shared system prompt (~240 tokens)
        body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "Name a color."}],
                "max_tokens": 4, "temperature": 0}  # no "model": one model is served

        def ask(key=None, salt=None, question="Name a color."):
            b = json.loads(json.dumps(body))
            b["messages"][1]["content"] = question
            if salt is not None:
                b["cache_salt"] = salt
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            status, payload, _ = s.request("POST", "/v1/chat/completions", b, headers)
            assert status == 200, payload
            r = json.loads(payload)
            return r["usage"]["prompt_tokens_details"]["cached_tokens"], r["choices"][0]["message"]["content"]

        first, text1 = ask("alice")
        assert first == 0
        again, text2 = ask("alice", question="Name an animal.")
        assert again >= 200 and again % 16 == 0, again  # the system prompt's whole blocks
        assert ask("alice")[1] == text1  # a hit changes nothing
        # Another tenant (API key) or another salt never sees alice's prefix.
        assert ask("bob")[0] == 0
        assert ask("alice", salt="s1")[0] == 0
        assert ask("alice", salt="s1", question="Name a fruit.")[0] >= 200
        m = s.metrics("vllm:")
        assert m["vllm:prefix_cache_hits"] > 0 and m["vllm:prefix_cache_queries"] >= m["vllm:prefix_cache_hits"]
        for k in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
            assert k in m, k
        assert 0.0 < m["vllm:kv_cache_usage_perc"] <= 1.0  # the tree keeps blocks
        # The official client with the same key and no model field works too.
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="alice")
        r = c.chat.completions.create(model=MODEL_ID, messages=body["messages"], max_tokens=4, temperature=0)
        assert r.usage.prompt_tokens_details.cached_tokens >= 200
    finally:
        s.stop()
    off = Server(cachet_bin, default_model, "--no-prefix-cache")
    try:
        for _ in range(2):
            status, payload, _ = off.request("POST", "/v1/chat/completions", body)
            assert json.loads(payload)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    finally:
        off.stop()


def test_dashboard_shows_the_tree_growing_in_headless_chromium(cachet_bin, default_model):
    """Issue #16 must-show 4: the /dashboard page, in Debian's headless chromium, shows the radix tree grow as
    requests with shared prefixes arrive; screenshot saved (CACHET_DASHBOARD_SCREENSHOT, default
    build/dashboard.png)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    s = Server(cachet_bin, default_model, "--parallel", "8", "--api-key", "sekret")
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1100,900"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        status, _, _ = s.request("GET", "/dashboard/state")
        assert status == 401  # the tree shows prompts: with --api-key, the state wants the key
        driver.get(f"http://127.0.0.1:{s.port}/dashboard#key=sekret")
        WebDriverWait(driver, 30).until(lambda d: "SmolLM2" in d.find_element(By.ID, "model").text)
        assert driver.find_elements(By.CSS_SELECTOR, "#nodes tr") == []
        rows_seen = []
        systems = ["You are a pirate. Answer like a pirate would, with many arrs. " * 6,
                   "You are a librarian who answers only with book titles and authors. " * 6]
        for i, question in enumerate(["Name a color.", "Name a fruit.", "Name a city.", "Name a river."]):
            body = {"messages": [{"role": "system", "content": systems[i % 2]}, {"role": "user", "content": question}],
                    "max_tokens": 8, "temperature": 0}
            status, payload, _ = s.request("POST", "/v1/chat/completions", body, {"Authorization": "Bearer sekret"})
            assert status == 200, payload
            time.sleep(1.2)  # the page polls twice a second; the snapshot refreshes four times
            rows_seen.append(len(driver.find_elements(By.CSS_SELECTOR, "#nodes tr")))
        text = driver.find_element(By.ID, "nodes").text
        hitrate = driver.find_element(By.ID, "hitrate").text
        shot = os.environ.get("CACHET_DASHBOARD_SCREENSHOT", str(ROOT_DIR / "build" / "dashboard.png"))
        driver.save_screenshot(shot)
        print(f"dashboard: rows {rows_seen}, hit rate {hitrate}; screenshot {shot}")
    finally:
        driver.quit()
        s.stop()
    assert rows_seen[0] >= 1 and rows_seen[-1] > rows_seen[0], rows_seen  # the tree grew
    assert "pirate" in text and "librarian" in text, text
    assert hitrate.endswith("%") and float(hitrate[:-1]) > 0, hitrate
