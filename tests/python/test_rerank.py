"""Encoders and rerankers: bert, nomic-bert(-moe), modern-bert and gemma-embedding embeddings against llama.cpp's (its
Python binding) for each pooling; rerank scores of bert, modern-bert and Qwen3-style rerankers against llama.cpp's
rank pooling on the pairs it forms; /v1/rerank and /rerank in the Jina / Cohere shape; batching never changes a
vector; bad requests get clear 4xx answers and the server keeps serving."""
import ctypes
import json
import subprocess

import numpy as np
import pytest

from test_embeddings import cosine_distance, ours
from test_server import Server

TEXTS = ["hello world", "the cat sat on the mat", "what is the capital of france? paris is. " * 8, "x",
         "Ünïcödé 🦙 1234"]
QUERY = "what is the capital of france"
DOCS = ["paris is the capital of france", "the cat sat on the mat", "berlin is a city on a river", "x",
        "hello world " * 10]

# arch -> extra synth flags: windows narrower than the long text, so the centred windows are exercised.
ENCODERS = {
    "bert": ["--n-head-kv", "4", "--n-vocab", "300"],
    "nomic-bert": ["--n-head-kv", "4", "--n-vocab", "400"],
    "nomic-bert-moe": ["--n-head-kv", "4", "--n-vocab", "400", "--n-layer", "4", "--experts", "4",
                       "--experts-used", "2", "--n-ff", "96"],
    "modern-bert": ["--n-head-kv", "4", "--n-vocab", "400", "--n-layer", "4", "--sliding-window", "8",
                    "--n-ff", "96"],
    "gemma-embedding": ["--n-head-kv", "2", "--n-vocab", "400", "--n-layer", "6", "--sliding-window", "8",
                        "--dense", "96"],
}


def synth(cachet_bin, path, arch, pooling_type, wtype="F32", extra=(), n_ctx=512):
    flags = {"--n-embd": "64", "--n-head": "4", "--n-layer": "2"}
    flags.update(zip(extra[::2], extra[1::2]))  # extra: flag, value pairs overriding the defaults
    args = [x for kv in flags.items() for x in kv]
    subprocess.run([cachet_bin, "synth", "--arch", arch, "--type", wtype, "--n-ctx", str(n_ctx), "--pooling-type",
                    str(pooling_type), *args, "-o", str(path)], check=True, capture_output=True)
    return path


def llama(path, **kw):
    import llama_cpp

    return llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2,
                           verbose=False, **kw)


@pytest.mark.parametrize("arch", list(ENCODERS))
@pytest.mark.parametrize("pooling_type", [0, 1, 2])
def test_encoder_embeddings_equal_llama_cpp(cachet_bin, tmp_path, arch, pooling_type):
    for wtype in ("F32", "Q8_0"):
        path = synth(cachet_bin, tmp_path / f"{arch}-{pooling_type}-{wtype}.gguf", arch, pooling_type, wtype,
                     ENCODERS[arch])
        m = llama(path)
        assert m.pooling_type() == pooling_type
        ref = [m.embed(t, normalize=True) for t in TEXTS]
        del m
        precise = [json.loads(line) for line in ours(cachet_bin, path, TEXTS, "--precise")]
        fast = [json.loads(line) for line in ours(cachet_bin, path, TEXTS)]
        # F32 weights: the same arithmetic as llama.cpp's (f32 activations), within 1e-4 (measured: 1e-7 and
        # less). Q8_0: llama.cpp's CPU path and both of ours (int8 activations, or f32 over dequantized
        # weights) are three roundings of one model, 1e-5..1.3e-4 apart on these 64-wide random models.
        bound = 1e-4 if wtype == "F32" else 3e-4
        if pooling_type == 0:  # none: a vector per token, each compared
            precise, fast, ref = (sum(x, []) for x in (precise, fast, ref))
            assert len(precise) == len(fast) == len(ref) > 100
            for ours_ in (precise, fast):
                d = np.sort([cosine_distance(o, r) for o, r in zip(ours_, ref)])
                if wtype == "F32":
                    assert d[-1] < bound, (arch, wtype)
                else:
                    # A single token's vector has no mean to average its rounding away, and a MoE token whose
                    # router is near a tie can take another expert under another rounding: the median within
                    # the bound, 99% within 3x, none past 0.05 (measured: nomic-bert-moe 8 of 552 tokens
                    # over 3e-4, the worst 1.9e-2).
                    assert d[len(d) // 2] < bound and d[int(0.99 * len(d))] < 3 * bound and d[-1] < 0.05, (arch, d[-5:])
            return
        if arch == "nomic-bert-moe" and wtype != "F32":
            # The same MoE tie (see above) can fall on the one token CLS pooling reads: at most one input of five
            # past the bound, none past 0.05.
            for ours_ in (precise, fast):
                d = [cosine_distance(o, r) for o, r in zip(ours_, ref)]
                assert sum(x >= bound for x in d) <= 1 and max(d) < 0.05, (pooling_type, d)
            return
        for t, p, f, r in zip(TEXTS, precise, fast, ref):
            assert len(p) == len(f) == len(r) == 64
            assert cosine_distance(p, r) < bound, (arch, pooling_type, wtype, t)
            assert cosine_distance(f, r) < bound, (arch, pooling_type, wtype, t, "int8 activations")


def test_an_encoder_batch_gives_each_input_its_vector_alone(cachet_bin, tmp_path):
    for arch in ("bert", "modern-bert"):
        path = synth(cachet_bin, tmp_path / f"batch-{arch}.gguf", arch, 1, "Q4_0", ENCODERS[arch])
        batched = ours(cachet_bin, path, TEXTS)
        alone = [ours(cachet_bin, path, [t])[0] for t in TEXTS]
        assert batched == alone  # the printed floats, so bitwise


def llama_pair_tokens(m, query, doc, template):
    """The pair as llama-server's format_prompt_rerank forms it, with llama.cpp's own tokenizer."""
    import llama_cpp

    if template is not None:
        text = template.replace("{query}", query).replace("{document}", doc)
        return m.tokenize(text.encode(), add_bos=False, special=True)
    vocab = llama_cpp.llama_model_get_vocab(m.model)
    eos = llama_cpp.llama_vocab_eos(vocab)
    if eos == -1:
        eos = llama_cpp.llama_vocab_sep(vocab)
    out = []
    if llama_cpp.llama_vocab_get_add_bos(vocab):
        out.append(llama_cpp.llama_vocab_bos(vocab))
    out += m.tokenize(query.encode(), add_bos=False, special=False)
    if llama_cpp.llama_vocab_get_add_eos(vocab):
        out.append(eos)
    if llama_cpp.llama_vocab_get_add_sep(vocab):
        out.append(llama_cpp.llama_vocab_sep(vocab))
    out += m.tokenize(doc.encode(), add_bos=False, special=False)
    if llama_cpp.llama_vocab_get_add_eos(vocab):
        out.append(eos)
    return out


def llama_rank_score(m, tokens):
    """llama.cpp's rank pooling of one sequence: the first value of its pooled output (what llama-server sends)."""
    import llama_cpp

    m._batch.reset()
    m._batch.add_sequence(tokens, 0, True)
    m._ctx.kv_cache_clear()
    m._ctx.decode(m._batch)
    ptr = llama_cpp.llama_get_embeddings_seq(m._ctx.ctx, 0)
    return float(ptr[0])


# name -> (arch, synth flags, rerank template the file carries or None)
RERANKERS = {
    "bert": ("bert", ["--n-head-kv", "4", "--n-vocab", "300", "--cls-out", "1"], None),
    "modern-bert": ("modern-bert", ENCODERS["modern-bert"] + ["--cls-out", "1"], None),
    "qwen3": ("qwen3", ["--n-head-kv", "2", "--n-vocab", "400", "--cls-out", "2"],
              "<s>Query: {query}\nDocument: {document}</s>"),
}


@pytest.mark.parametrize("name", list(RERANKERS))
def test_rerank_scores_equal_llama_cpp(cachet_bin, tmp_path, name):
    arch, flags, template = RERANKERS[name]
    path = synth(cachet_bin, tmp_path / f"rerank-{name}.gguf", arch, 4, "F32", flags)
    m = llama(path)
    assert m.pooling_type() == 4
    pairs = [llama_pair_tokens(m, QUERY, d, template) for d in DOCS]
    ref = [llama_rank_score(m, p) for p in pairs]
    del m
    s = Server(cachet_bin, path)
    try:
        status, payload, _ = s.request("POST", "/v1/rerank", {"query": QUERY, "documents": DOCS})
        assert status == 200, payload
        got = json.loads(payload)
        assert got["usage"]["prompt_tokens"] == sum(len(p) for p in pairs)  # the same pairs, token for token
        scores = {r["index"]: r["relevance_score"] for r in got["results"]}
        assert sorted(scores) == list(range(len(DOCS)))
        spread = max(ref) - min(ref)
        for i, r in enumerate(ref):
            assert abs(scores[i] - r) <= 2e-3 * max(1.0, abs(r)), (name, i, scores[i], r)
        assert spread > 1e-3  # the documents are told apart
        order = [r["index"] for r in got["results"]]
        assert [scores[i] for i in order] == sorted(scores.values(), reverse=True)
        assert all(r["document"]["text"] == DOCS[r["index"]] for r in got["results"])
    finally:
        s.stop()


def test_rerank_api_shape_and_bad_requests(cachet_bin, tmp_path):
    arch, flags, _ = RERANKERS["bert"]
    path = synth(cachet_bin, tmp_path / "rerank-api.gguf", arch, 4, "Q8_0", flags, n_ctx=128)
    s = Server(cachet_bin, path)
    try:
        status, payload, _ = s.request("POST", "/v1/rerank", {"query": QUERY, "documents": DOCS})
        full = json.loads(payload)["results"]
        # Cohere-style document objects, top_n, no documents back; the /rerank alias answers the same.
        status, payload, _ = s.request("POST", "/rerank", {"query": QUERY, "documents": [{"text": d} for d in DOCS],
                                                           "top_n": 2, "return_documents": False})
        assert status == 200
        top = json.loads(payload)["results"]
        assert [(r["index"], r["relevance_score"]) for r in top] == [(r["index"], r["relevance_score"])
                                                                      for r in full[:2]]
        assert all("document" not in r for r in top)
        cases = [
            ({"query": "", "documents": ["a"]}, "'query' is an empty string"),
            ({"query": "q", "documents": []}, "must not be empty"),
            ({"query": "q", "documents": [""]}, "empty string"),
            ({"query": "q", "documents": ["ok"] * 10000}, "at most 2048"),
            ({"query": "q", "documents": ["word " * 400]}, "context"),
            ({"query": "q", "documents": [5]}, "strings or objects"),
            ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
            ({"query": "q", "documents": ["a"], "bogus": 1}, "unknown field"),
            ({"documents": ["a"]}, "'query' is required"),
            ({"query": "q"}, "'documents' is required"),
        ]
        for body, needle in cases:
            status, payload, _ = s.request("POST", "/v1/rerank", body)
            assert 400 <= status < 500, (needle, status)
            assert needle in json.loads(payload)["error"]["message"], (needle, payload)
        # A reranker gives scores, not embeddings; and it does not generate text.
        status, payload, _ = s.request("POST", "/v1/embeddings", {"input": "hi"})
        assert status == 400 and "/v1/rerank" in json.loads(payload)["error"]["message"]
        status, payload, _ = s.request("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
        assert status == 400 and "does not generate" in json.loads(payload)["error"]["message"]
        status, payload, _ = s.request("POST", "/v1/rerank", {"query": QUERY, "documents": DOCS})
        assert status == 200 and json.loads(payload)["results"] == full  # still serving, same answer
    finally:
        s.stop()
    # A model without a classifier head has no /v1/rerank.
    plain = synth(cachet_bin, tmp_path / "plain-bert.gguf", "bert", 2, "F32", ENCODERS["bert"])
    s = Server(cachet_bin, plain)
    try:
        status, payload, _ = s.request("POST", "/v1/rerank", {"query": "q", "documents": ["a"]})
        assert status == 400 and "not a reranker" in json.loads(payload)["error"]["message"]
    finally:
        s.stop()
