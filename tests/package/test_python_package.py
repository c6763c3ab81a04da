"""The Python package as a user gets it (`pip install .` into a fresh venv: scripts/test_python_package.sh):
greedy ids equal `cachet run`'s, streaming yields the same text, a batch gives each prompt what it gets alone, and
bad arguments raise Python exceptions carrying the engine's message."""
import json
import os
import subprocess

import pytest

import cachet

BIN = os.environ["CACHET_BIN"]
MODEL = os.environ["CACHET_MODEL"]
PROMPTS = ["The capital of France is", "Once upon a time,", "def fibonacci(n):"]


def cli(prompt, n, *extra):
    r = subprocess.run([BIN, "run", "-m", MODEL, "-p", prompt, "-n", str(n), "--format", "json", *extra],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def llm():
    return cachet.LLM(MODEL, threads=2)


def test_greedy_ids_equal_the_cli(llm):
    outs = llm.generate(PROMPTS, cachet.SamplingParams(max_tokens=20))
    assert len(outs) == len(PROMPTS)
    for prompt, out in zip(PROMPTS, outs):
        ref = cli(prompt, 20)
        assert out.token_ids == ref["token_ids"], prompt
        assert out.text == ref["text"]
        assert out.finish == (cachet.FinishReason.STOP if ref["finish_reason"] == "stop" else cachet.FinishReason.LENGTH)
    # one prompt alone gets what it got in the batch, and token ids work as a prompt
    [alone] = llm.generate(PROMPTS[1], cachet.SamplingParams(max_tokens=20))
    assert alone.token_ids == outs[1].token_ids
    ids = llm.tokenize(PROMPTS[1])
    [by_ids] = llm.generate(ids, cachet.SamplingParams(max_tokens=20))
    assert by_ids.token_ids == outs[1].token_ids


def test_sampling_matches_the_cli(llm):
    p = cachet.SamplingParams(max_tokens=16, temperature=0.8, top_p=0.9, seed=7)
    [out] = llm.generate(PROMPTS[0], p)
    ref = cli(PROMPTS[0], 16, "--temp", "0.8", "--top-p", "0.9", "--seed", "7")
    assert out.token_ids == ref["token_ids"]


def test_streaming_yields_the_same_text(llm):
    p = cachet.SamplingParams(max_tokens=24)
    [whole] = llm.generate(PROMPTS[2], p)
    stream = llm.stream(PROMPTS[2], p)
    events = list(stream)
    assert "".join(e.text for e in events) == whole.text
    assert [e.token.id for e in events if e.token is not None] == whole.token_ids
    assert events[-1].finish is not None and stream.completion.token_ids == whole.token_ids
    # closing a stream early cancels it; the engine goes on serving
    s = llm.stream(PROMPTS[0], cachet.SamplingParams(max_tokens=200))
    first = next(s)
    assert first.token is not None
    s.close()
    [again] = llm.generate(PROMPTS[2], p)
    assert again.token_ids == whole.token_ids


def test_chat_and_tokenizer(llm):
    out = llm.chat([{"role": "user", "content": "What is the capital of France? Answer in one sentence."}],
                   cachet.SamplingParams(max_tokens=32))
    assert "Paris" in out.text and out.finish == cachet.FinishReason.STOP
    text = "Hello, world! 🦙"
    assert llm.detokenize(llm.tokenize(text, add_special=False)) == text
    assert llm.n_vocab == 49152 and llm.architecture == "llama"


def test_bad_arguments_raise_with_the_engines_message(llm, tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        cachet.LLM(str(tmp_path / "missing.gguf"))
    assert "missing.gguf" in str(e.value)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(Exception) as e:
        cachet.LLM(str(bad))
    assert str(e.value)
    with pytest.raises(ValueError, match="temperature"):
        llm.generate("hi", cachet.SamplingParams(temperature=-1.0))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.generate([10 ** 6], cachet.SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="empty"):
        llm.generate([[]], cachet.SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="KV cache type"):
        cachet.LLM(MODEL, kv_type="q9")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.detokenize([-5])
    # the LLM is still usable after every error
    [out] = llm.generate(PROMPTS[0], cachet.SamplingParams(max_tokens=4))
    assert len(out.token_ids) == 4


def test_embeddings_equal_the_cli(llm):
    # The default model's file names no pooling: asked for, mean and last give what `cachet embed` prints.
    with pytest.raises(ValueError, match="names no pooling"):
        llm.embed("hello")
    for pooling in ("mean", "last"):
        got = llm.embed(PROMPTS, pooling=pooling)
        r = subprocess.run([BIN, "embed", "-m", MODEL, "--pooling", pooling, "-t", "2",
                            *sum([["--text", p] for p in PROMPTS], [])], capture_output=True, text=True, check=True)
        assert got == [json.loads(line) for line in r.stdout.splitlines()]
        assert llm.embed(PROMPTS[0], pooling=pooling) == [got[0]]
        assert llm.embed(llm.tokenize(PROMPTS[0]), pooling=pooling) == [got[0]]
    [cut] = llm.embed(PROMPTS[0], pooling="mean", dimensions=8)
    assert len(cut) == 8 and abs(sum(x * x for x in cut) - 1.0) < 1e-5
    with pytest.raises(ValueError, match="pooling must be"):
        llm.embed("hi", pooling="max")
    with pytest.raises(ValueError, match="empty"):
        llm.embed([[]], pooling="mean")


def test_rerank_scores_are_rank_pooling_of_the_pairs(tmp_path):
    # A synthetic BERT reranker: each score is the classifier's output for [CLS] query [SEP] document (a WordPiece
    # vocabulary adds [CLS] and [SEP], no EOS), bitwise what rank pooling gives those token ids.
    path = str(tmp_path / "reranker.gguf")
    subprocess.run([BIN, "synth", "--arch", "bert", "--n-vocab", "300", "--n-head", "4", "--n-head-kv", "4",
                    "--pooling-type", "4", "--cls-out", "1", "-o", path], check=True, capture_output=True)
    m = cachet.LLM(path, threads=2)
    query, docs = "what is the capital of france", ["paris is the capital of france", "the cat sat on the mat", "x"]
    scores = m.rerank(query, docs)
    assert len(scores) == 3 and len(set(scores)) == 3
    cls, sep = m.tokenize("", add_special=True)
    for d, s in zip(docs, scores):
        pair = [cls] + m.tokenize(query, add_special=False) + [sep] + m.tokenize(d, add_special=False)
        assert m.embed(pair, pooling="rank") == [[s]]
    with pytest.raises(ValueError, match="empty"):
        m.rerank("", docs)
    plain = str(tmp_path / "plain.gguf")
    subprocess.run([BIN, "synth", "--arch", "bert", "--n-vocab", "300", "--n-head", "4", "--n-head-kv", "4",
                    "--pooling-type", "2", "-o", plain], check=True, capture_output=True)
    with pytest.raises(ValueError, match="classifier"):
        cachet.LLM(plain, threads=2).rerank("q", ["d"])
