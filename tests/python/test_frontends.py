"""Every front end runs on the one library API (include/cachet/llm.h): `cachet run`, `chat`, `batch`, beam search
(width 1), the server, and a program built against the installed package give the same greedy tokens for the
same prompt, and end-of-generation tokens and stop sequences end each of them the same way."""
import json
import os
import pathlib
import shutil
import subprocess

import pytest

from test_server import Server

ROOT = pathlib.Path(__file__).resolve().parents[2]
QUESTION = "What is the capital of France? Answer in one sentence."
END_IDS = {0, 2}  # <|endoftext|>, <|im_end|>


def run_json(cachet_bin, model, prompt, *extra):
    r = subprocess.run([cachet_bin, "run", "-m", model, "-p", prompt, "--format", "json", *extra],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def batch_json(cachet_bin, model, tmp_path, lines, *extra):
    f = tmp_path / "prompts.txt"
    f.write_text("\n".join(lines) + "\n")
    r = subprocess.run([cachet_bin, "batch", "-m", model, "-f", str(f), "--json", *extra],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def chat_text(cachet_bin, model, line, *extra):
    r = subprocess.run([cachet_bin, "chat", "-m", model, *extra], input=line + "\n", capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.rstrip("\n")


@pytest.fixture(scope="module")
def templated(cachet_bin, default_model):
    """The model's chat template around QUESTION (what `chat` and `batch` render; `run` and the completions endpoint
    take it as text, special tokens parsed)."""
    r = subprocess.run([cachet_bin, "template", "-m", default_model, "--messages", "-"],
                       input=json.dumps([{"role": "user", "content": QUESTION}]), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("<|im_start|>assistant\n"), r.stdout
    return r.stdout


def test_every_front_end_gives_the_same_greedy_reply(cachet_bin, default_model, tmp_path, templated):
    ref = run_json(cachet_bin, default_model, templated, "-n", "48")
    ids = ref["token_ids"]
    # The reply ends with the model's own end of turn: the token is reported, its text is not.
    assert ref["finish_reason"] == "stop" and ids[-1] in END_IDS, ref
    assert "Paris" in ref["text"] and "<|im_end|>" not in ref["text"], ref

    [b] = batch_json(cachet_bin, default_model, tmp_path, [QUESTION], "-n", "48")
    assert b["token_ids"] == ids[:-1] and b["text"] == ref["text"], (b, ref)

    assert chat_text(cachet_bin, default_model, QUESTION, "-n", "48") == ref["text"]

    beam = run_json(cachet_bin, default_model, templated, "-n", "48", "--beam-width", "1")
    assert beam["token_ids"] == ids and beam["text"] == ref["text"], (beam, ref)

    server = Server(cachet_bin, default_model)
    try:
        status, payload, _ = server.request("POST", "/v1/completions",
                                            {"prompt": templated, "max_tokens": 48, "temperature": 0})
        body = json.loads(payload)
        assert status == 200, body
        assert body["choices"][0]["text"] == ref["text"], (body, ref)
        assert body["choices"][0]["finish_reason"] == "stop"
        # usage counts the reply's tokens, not the end-of-turn token
        assert body["usage"]["completion_tokens"] == len(ids) - 1, body
        status, payload, _ = server.request("POST", "/v1/chat/completions",
                                            {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 48,
                                             "temperature": 0})
        body = json.loads(payload)
        assert status == 200 and body["choices"][0]["message"]["content"] == ref["text"], body
    finally:
        server.stop()


def test_stop_sequences_and_length_end_every_front_end_alike(cachet_bin, default_model, tmp_path, templated):
    ref = run_json(cachet_bin, default_model, templated, "-n", "48")
    full = ref["text"]
    cut = full.index("Paris")
    stopped = run_json(cachet_bin, default_model, templated, "-n", "48", "--stop", "Paris")
    assert stopped["finish_reason"] == "stop" and stopped["text"] == full[:cut], stopped
    [b] = batch_json(cachet_bin, default_model, tmp_path, [QUESTION], "-n", "48", "--stop", "Paris")
    assert b["text"] == full[:cut], b
    server = Server(cachet_bin, default_model)
    try:
        status, payload, _ = server.request("POST", "/v1/completions", {"prompt": templated, "max_tokens": 48,
                                                                         "temperature": 0, "stop": ["Paris"]})
        body = json.loads(payload)
        assert status == 200 and body["choices"][0]["text"] == full[:cut], body
        assert body["choices"][0]["finish_reason"] == "stop"
        # max_tokens: the same first tokens, "length" everywhere
        status, payload, _ = server.request("POST", "/v1/completions",
                                            {"prompt": templated, "max_tokens": 3, "temperature": 0})
        body = json.loads(payload)
        short = run_json(cachet_bin, default_model, templated, "-n", "3")
        assert short["finish_reason"] == "length" and short["token_ids"] == ref["token_ids"][:3], short
        assert body["choices"][0]["finish_reason"] == "length" and body["choices"][0]["text"] == short["text"]
    finally:
        server.stop()
    # --ignore-eos runs past the end of turn in run and batch alike
    long = run_json(cachet_bin, default_model, templated, "-n", str(len(ref["token_ids"]) + 4), "--ignore-eos")
    assert long["finish_reason"] == "length" and long["token_ids"][:len(ref["token_ids"])] == ref["token_ids"]
    [b] = batch_json(cachet_bin, default_model, tmp_path, [QUESTION], "-n", str(len(ref["token_ids"]) + 4),
                     "--ignore-eos")
    assert b["token_ids"] == long["token_ids"], (b, long)


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake builds the example")
def test_example_built_against_the_installed_package_matches_run(cachet_bin, default_model, tmp_path, templated):
    """cmake --install to a temporary prefix, then examples/ configured with find_package(cachet) alone."""
    build = pathlib.Path(cachet_bin).parent
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", str(build), "--prefix", str(prefix)], check=True, capture_output=True)
    assert (prefix / "include" / "cachet" / "cachet.h").exists()
    # Only the public headers are installed: no third-party header leaks through them.
    for h in (prefix / "include" / "cachet").iterdir():
        text = h.read_text()
        assert "nlohmann" not in text and "httplib" not in text and '#include "' not in text.replace(
            '#include "cachet/', ""), h
    ex = tmp_path / "examples-build"
    cfg = subprocess.run(["cmake", "-S", str(ROOT / "examples"), "-B", str(ex), f"-DCMAKE_PREFIX_PATH={prefix}",
                          "-DCMAKE_BUILD_TYPE=Release"], capture_output=True, text=True)
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    b = subprocess.run(["cmake", "--build", str(ex)], capture_output=True, text=True)
    assert b.returncode == 0, b.stdout + b.stderr
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    for prompt in ("The capital of France is", templated):
        r = subprocess.run([str(ex / "generate"), default_model, prompt, "24"], capture_output=True, text=True,
                           env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        ids = [int(x) for x in r.stderr.split("ids:")[1].split("\n")[0].split()]
        ref = run_json(cachet_bin, default_model, prompt, "-n", "24")
        assert ids == ref["token_ids"], (ids, ref)
        assert r.stdout == ref["text"], (r.stdout, ref["text"])
    bad = subprocess.run([str(ex / "generate"), str(tmp_path / "missing.gguf"), "x"], capture_output=True, text=True,
                         env=env)
    assert bad.returncode == 1 and "missing.gguf" in bad.stderr, bad.stderr
