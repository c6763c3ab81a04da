"""Speculative decoding end to end on the default model: the CLI (run, batch, chat) and the server (flags, the
per-request `speculative` field, metrics, the official openai client). Greedy output with speculation must equal
greedy output without, token for token, for a draft model (a Q4_0 requantization of the default model) and for
prompt lookup, alone and with other requests in the batch; stop sequences and max_tokens end a run that was
accepting a draft exactly where they would without one."""
import concurrent.futures
import json
import subprocess

import openai
import pytest

from test_server import MODEL_ID, Server

REWRITE = ("Rewrite the following passage in plain words, keeping every fact: The mitochondrion is an organelle "
           "found in the cells of most eukaryotes. It uses aerobic respiration to generate adenosine triphosphate, "
           "which is used throughout the cell as a source of chemical energy. Mitochondria have their own genome, "
           "which is inherited from the mother.")


@pytest.fixture(scope="module")
def draft_model(cachet_bin, default_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("spec") / "draft-Q4_0.gguf"
    subprocess.run([cachet_bin, "quantize", "-m", default_model, "-o", str(out), "--type", "Q4_0",
                    "--allow-requantize"], check=True, capture_output=True)
    return str(out)


def run_json(cachet_bin, model, *args):
    r = subprocess.run([cachet_bin, "run", "-m", model, "--format", "json", "-t", "2", *args], check=True,
                       capture_output=True, text=True)
    return json.loads(r.stdout)


def test_run_with_speculation_gives_the_same_tokens_and_reports_counts(cachet_bin, default_model, draft_model):
    base = run_json(cachet_bin, default_model, "-p", REWRITE, "-n", "96")
    assert "speculative" not in base
    # --draft-fixed: every step drafts (this draft is as costly as the default model, so the cost model
    # rightly never runs it on its own; the adaptive run must still give the same tokens).
    # A requantization of the model reads the model's KV cache unless --draft-own-kv.
    for flags in (["--lookup"], ["--draft-model", draft_model, "--draft-fixed"],
                  ["--draft-model", draft_model, "--draft-fixed", "--draft-own-kv"],
                  ["--draft-model", draft_model, "--draft-max", "2", "--draft-fixed"], ["--draft-model", draft_model]):
        got = run_json(cachet_bin, default_model, "-p", REWRITE, "-n", "96", *flags)
        assert got["token_ids"] == base["token_ids"], flags
        assert got["text"] == base["text"]
        s = got["speculative"]
        if "--draft-model" in flags:
            assert s["draft_kv"] == ("own" if "--draft-own-kv" in flags else "target"), (flags, s)
        else:
            assert "draft_kv" not in s
        if flags[-1] == draft_model:
            assert 0 <= s["accepted"] <= s["proposed"], (flags, s)
        else:
            assert s["proposed"] > 0 and 0 < s["accepted"] <= s["proposed"], (flags, s)
    # A stop sequence ends the run where it ends without speculation, even mid-draft.
    words = base["text"].split()
    stop = " ".join(words[8:10])
    want = run_json(cachet_bin, default_model, "-p", REWRITE, "-n", "96", "--stop", stop)
    got = run_json(cachet_bin, default_model, "-p", REWRITE, "-n", "96", "--stop", stop, "--lookup")
    assert got["text"] == want["text"] and got["finish_reason"] == "stop"
    # Logprobs are the target's, position for position.
    want = run_json(cachet_bin, default_model, "-p", REWRITE, "-n", "24", "--logprobs", "2")
    got = run_json(cachet_bin, default_model, "-p", REWRITE, "-n", "24", "--logprobs", "2", "--draft-model", draft_model)
    assert [x["id"] for x in got["logprobs"]] == [x["id"] for x in want["logprobs"]]
    for a, b in zip(got["logprobs"], want["logprobs"]):
        assert a["logprob"] == pytest.approx(b["logprob"], abs=1e-6)
    bad = subprocess.run([cachet_bin, "run", "-m", default_model, "-p", "x", "--lookup", "--draft-model", draft_model],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "give one of" in bad.stderr


def test_batch_and_chat_with_speculation(cachet_bin, default_model, draft_model, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("\n".join([REWRITE, "Name three colors.", "Repeat after me: one two three four five six.",
                                  REWRITE.replace("mitochondrion", "chloroplast")]) + "\n")

    def batch(*flags):
        r = subprocess.run([cachet_bin, "batch", "-m", default_model, "-f", str(prompts), "-n", "48", "--json",
                            "-t", "2", *flags], check=True, capture_output=True, text=True)
        return [json.loads(line)["token_ids"] for line in r.stdout.splitlines()], r.stderr

    base, _ = batch()
    for flags in (["--lookup"], ["--draft-model", draft_model]):
        got, err = batch(*flags)
        assert got == base, flags
        assert "draft tokens verified" in err
    chat_in = "Repeat after me: red green blue red green blue.\nAgain, please.\n"
    plain = subprocess.run([cachet_bin, "chat", "-m", default_model, "-n", "40", "-t", "2"], input=chat_in,
                           capture_output=True, text=True, check=True)
    spec = subprocess.run([cachet_bin, "chat", "-m", default_model, "-n", "40", "-t", "2", "--lookup"], input=chat_in,
                          capture_output=True, text=True, check=True)
    assert spec.stdout == plain.stdout
    assert "speculative:" in spec.stderr and "reused" in spec.stderr


def test_server_speculation_flags_field_metrics_and_batch(cachet_bin, default_model, draft_model):
    # --draft-fixed: the metrics must see drafts whatever the cost model measures on a loaded machine (with it on,
    # a batch of 8 on a busy CI machine drafted 1 token in one run and accepted none).
    s = Server(cachet_bin, default_model, "--parallel", "8", "--draft-model", draft_model, "--draft-fixed")
    try:
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="x")

        def ask(content, mode, **kw):
            r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": content}],
                                          temperature=0, extra_body={"speculative": mode}, **kw)
            return r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens

        questions = [REWRITE, "Name three colors.", "Count from one to twenty.", "What is 2 + 2?",
                     REWRITE.replace("mother", "father"), "Say hello in French.", "List the planets.", "Spell cat."]
        base = {q: ask(q, "off", max_tokens=48) for q in questions}
        before = s.metrics("vllm:")
        # All eight at once, speculation kinds mixed in one batch.
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            futs = {(q, m): ex.submit(ask, q, m, max_tokens=48)
                    for i, q in enumerate(questions) for m in (("draft", "lookup")[i % 2],)}
            for (q, m), f in futs.items():
                assert f.result() == base[q], (q, m)
        after = s.metrics("vllm:")
        drafted = after["vllm:spec_decode_num_draft_tokens"] - before["vllm:spec_decode_num_draft_tokens"]
        accepted = after["vllm:spec_decode_num_accepted_tokens"] - before["vllm:spec_decode_num_accepted_tokens"]
        assert drafted > 0 and 0 < accepted <= drafted
        # max_tokens ends a run mid-acceptance at exactly max_tokens; a stop sequence where it would anyway.
        text, reason, n = ask(REWRITE, "draft", max_tokens=5)
        assert n == 5 and reason == "length" and text == ask(REWRITE, "off", max_tokens=5)[0]
        stop = base[REWRITE][0].split()[6]
        assert ask(REWRITE, "draft", max_tokens=48, stop=[stop]) == ask(REWRITE, "off", max_tokens=48, stop=[stop])
        status, payload, _ = s.request("POST", "/v1/chat/completions",
                                       {"messages": [{"role": "user", "content": "hi"}], "speculative": "fast"})
        assert status == 400 and b"speculative" in payload
    finally:
        s.stop()
    # Without a draft model, asking for one is an error; lookup works.
    s = Server(cachet_bin, default_model, "--lookup")
    try:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "speculative": "draft"}
        status, payload, _ = s.request("POST", "/v1/chat/completions", body)
        assert status == 400 and b"draft model" in payload
        body["speculative"] = "lookup"
        assert s.request("POST", "/v1/chat/completions", body)[0] == 200
    finally:
        s.stop()
