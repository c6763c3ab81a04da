"""Hostile input against `cachet serve`: request bodies built to hurt the parser, and chat templates built to
hurt the Jinja interpreter (vLLM's per-request `chat_template`, accepted with --trust-request-chat-template).
Each gets a 400 with a message (the interpreter's work bound is counted in tests/test_jinja_limits.cc), and the server serves the next request normally."""
import json

import pytest

from test_server import Server

REAL = [{"role": "user", "content": "What is the capital of France?"}]

HOSTILE_TEMPLATES = {
    "recursive macro": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "100k nested parentheses": "{{ " + "(" * 100000 + "1" + ")" * 100000 + " }}",
    "40k nested ifs": "{% if true %}" * 40000 + "x" + "{% endif %}" * 40000,  # under the 1 MiB request cap
    "1e10-step loop": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "string doubled 60 times": "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
                               "{% endfor %}{{ ns.s }}",
    "'x' * 10**9": "{{ 'x' * 10**9 }}",
    "list appended to itself": "{% set l = [] %}{% set _ = l.append(l) %}{{ l }}",
    "deep filters": "{{ 'a'" + "|upper" * 100000 + " }}",
    "huge range": "{% for i in range(10**12) %}{% endfor %}",
    "self-include": "{% include 'chat.jinja' %}",
}


@pytest.fixture(scope="module")
def server(cachet_bin, default_model):
    s = Server(cachet_bin, default_model, "--trust-request-chat-template", "--max-body", str(32 << 20), "-c", "2048")
    yield s
    s.stop()


def chat(server, **extra):
    body = {"messages": REAL, "max_tokens": 4, "temperature": 0, **extra}
    status, payload, _ = server.request("POST", "/v1/chat/completions", body)
    return status, json.loads(payload)


@pytest.mark.parametrize("name", list(HOSTILE_TEMPLATES))
def test_hostile_template_gets_400_and_the_next_request_is_served(server, name):
    status, body = chat(server, chat_template=HOSTILE_TEMPLATES[name])
    assert status == 400, body
    assert body["error"]["message"].startswith("chat template"), body
    status, body = chat(server)  # the model's own template
    assert status == 200, body
    assert body["choices"][0]["message"]["content"]
    assert server.proc.poll() is None


def test_request_templates_are_refused_unless_trusted(cachet_bin, default_model):
    s = Server(cachet_bin, default_model)
    try:
        status, body = chat(s, chat_template="{{ messages[0].content }}")
        assert status == 400 and "--trust-request-chat-template" in body["error"]["message"], body
    finally:
        s.stop()


def nested(depth):
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("field", ["stop", "logit_bias", "messages", "metadata_unknown", "stream_options"])
def test_body_nested_100k_deep_is_refused(server, field):
    raw = '{"messages": [{"role": "user", "content": "hi"}], "%s": %s}' % (field, nested(100000))
    status, payload, _ = server.request("POST", "/v1/chat/completions", raw=raw.encode())
    body = json.loads(payload)
    assert status == 400, body
    assert "nested deeper than 64" in body["error"]["message"], body


def test_ten_megabyte_strings_are_refused_with_a_message(server):
    big = "a" * (10 << 20)
    cases = [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": big}]}, "context length"),
        ("/v1/completions", {"prompt": big}, "context length"),
        ("/v1/chat/completions", {"messages": REAL, "stop": big}, "stop sequences"),
        ("/v1/chat/completions", {"messages": REAL, "user": big}, "'user'"),
        ("/v1/chat/completions", {"messages": REAL, "model": big}, "'model'"),
        ("/v1/chat/completions", {"messages": REAL, "cache_salt": big}, "'cache_salt'"),
        ("/v1/chat/completions", {"messages": REAL, "chat_template": big}, "'chat_template'"),
    ]
    for path, body, needle in cases:
        status, payload, _ = server.request("POST", path, body)
        msg = json.loads(payload)["error"]["message"]
        assert status == 400, (path, list(body), msg)
        assert needle in msg, (list(body), msg)


NUMERIC_FIELDS = {  # field -> values out of its range (or of any range)
    "max_tokens": [0, -1, 2 ** 31, 1e300, 2 ** 70, 1.5],
    "max_completion_tokens": [0, -5, 2 ** 64, 1e19],
    "temperature": [-0.1, 2.01, 1e300, -1e300],
    "top_p": [0, -1, 1.5, 1e300],
    "presence_penalty": [-2.5, 3, 1e308],
    "frequency_penalty": [-2.5, 3, -1e308],
    "min_p": [-0.5, 1.5],
    "repetition_penalty": [0, -1, 101, 1e300],
    "top_k": [-1, 2 ** 31, 2 ** 70, 0.5],
    "n": [0, -1, 17, 2 ** 63, 1e10],
    "top_logprobs": [-1, 21, 2 ** 40],
    "seed": [1.5, 2 ** 70, 1e300],
}


@pytest.mark.parametrize("field", list(NUMERIC_FIELDS))
def test_numbers_out_of_range_in_every_numeric_field(server, field):
    for v in NUMERIC_FIELDS[field]:
        body = {"messages": REAL, "max_tokens": 2, field: v}
        if field == "top_logprobs":
            body["logprobs"] = True
        if field == "max_completion_tokens":
            body.pop("max_tokens")
        status, payload, _ = server.request("POST", "/v1/chat/completions", body)
        err = json.loads(payload)["error"]
        assert status == 400, (field, v, err)
        assert err["param"] == field and err["message"], (field, v, err)
    # logit_bias values and the completions' integer logprobs, the same way
    for lb in ({"1": 101}, {"1": -1e300}, {"99999999": 1}, {"-1": 1}, {"1e3": 1}):
        status, payload, _ = server.request("POST", "/v1/chat/completions", {"messages": REAL, "logit_bias": lb})
        assert status == 400 and json.loads(payload)["error"]["param"] == "logit_bias", lb
    for lp in (-1, 21, 2 ** 40):
        status, payload, _ = server.request("POST", "/v1/completions", {"prompt": "hi", "logprobs": lp})
        assert status == 400 and json.loads(payload)["error"]["param"] == "logprobs", lp


def test_hostile_template_file_given_to_serve(cachet_bin, default_model, tmp_path):
    """A hostile template given at start (as one inside the GGUF would be): chat requests get 400 quickly and the
    server keeps serving completions."""
    bad = tmp_path / "bad.jinja"
    bad.write_text(HOSTILE_TEMPLATES["recursive macro"])
    s = Server(cachet_bin, default_model, "--chat-template-file", str(bad))
    try:
        for _ in range(3):
            status, body = chat(s)
            assert status == 400 and "levels deep" in body["error"]["message"], body
        status, payload, _ = s.request("POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4})
        assert status == 200, payload
    finally:
        s.stop()


def thread_stacks_kib(pid):
    """Resident KiB of each 8 MiB anonymous mapping (the threads' stacks)."""
    out, size, anon = [], 0, False
    for line in open(f"/proc/{pid}/smaps"):
        head = line.split()
        if "-" in head[0] and not head[0].endswith(":"):
            a, b = (int(x, 16) for x in head[0].split("-"))
            size, anon = b - a, len(head) <= 5
        elif head[0] == "Rss:" and anon and size == 8 << 20:
            out.append(int(head[1]))
    return out


def test_deep_requests_leave_no_stack_behind(server):
    """A template at the interpreter's depth limit, sent on 32 connections at once 300 times, reaches most of the
    256 HTTP threads; each hands back the stack pages it touched (server/stack_trim.h), so no thread keeps
    hundreds of KiB resident for the rest of its life (without it: ~290 KiB each, 74 MiB over the pool)."""
    from concurrent.futures import ThreadPoolExecutor
    deep = HOSTILE_TEMPLATES["recursive macro"]
    with ThreadPoolExecutor(32) as pool:
        statuses = set(pool.map(lambda _: chat(server, chat_template=deep)[0], range(300)))
    assert statuses == {400}
    stacks = thread_stacks_kib(server.proc.pid)
    assert len(stacks) >= 64, len(stacks)
    assert max(stacks) <= 160, sorted(stacks)[-8:]
    assert chat(server)[0] == 200
