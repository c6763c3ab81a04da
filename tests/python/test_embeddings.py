"""Embeddings: `cachet embed` against llama.cpp's (its Python binding's `embed`) on synthetic embedding models of
three architectures and every pooling type; batching never changes a vector; the OpenAI client's
`embeddings.create` (float and base64, `dimensions`) gets what `cachet embed` prints; bad inputs get clear 4xx
answers and the server keeps serving."""
import json
import subprocess

import numpy as np
import openai
import pytest

from test_server import Server

TEXTS = ["hello world", "abc", "The quick brown fox jumps over the lazy dog. " * 4, "x",
         "Ünïcödé and emoji 🦙 and digits 1234567890"]
POOLINGS = {0: "none", 1: "mean", 2: "cls", 3: "last"}


def synth(cachet_bin, path, arch, pooling_type, wtype="F32", n_ctx=1024):
    subprocess.run([cachet_bin, "synth", "--arch", arch, "--type", wtype, "--n-vocab", "512", "--n-embd", "128",
                    "--n-head", "4", "--n-head-kv", "2", "--n-layer", "2", "--n-ctx", str(n_ctx),
                    "--pooling-type", str(pooling_type), "-o", str(path)], check=True, capture_output=True)
    return path


def ours(cachet_bin, path, texts, *extra):
    args = [cachet_bin, "embed", "-m", str(path), *extra]
    for t in texts:
        args += ["--text", t]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return out.splitlines()


def cosine_distance(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return 1.0 - float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gemma3"])
@pytest.mark.parametrize("pooling_type", [0, 1, 2, 3])
def test_embeddings_equal_llama_cpp(cachet_bin, tmp_path, arch, pooling_type):
    import llama_cpp

    for wtype in ("F32", "Q8_0"):
        path = synth(cachet_bin, tmp_path / f"{arch}-{pooling_type}-{wtype}.gguf", arch, pooling_type, wtype)
        m = llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=1024, n_batch=1024, n_ubatch=1024,
                            n_threads=2, verbose=False)
        assert m.pooling_type() == pooling_type
        ref = [m.embed(t, normalize=True) for t in TEXTS]
        del m
        precise = [json.loads(line) for line in ours(cachet_bin, path, TEXTS, "--precise")]
        fast = [json.loads(line) for line in ours(cachet_bin, path, TEXTS)]
        # The arithmetic llama.cpp's CPU backend uses: f32 activations for F32 weights (--precise), int8 ones for
        # Q8_0 (the default path); the other path of each within a looser bound.
        same, other = (precise, fast) if wtype == "F32" else (fast, precise)
        if pooling_type == 0:  # none: a vector per token, each compared
            same, other, ref = (sum(x, []) for x in (same, other, ref))
            d = np.sort([cosine_distance(x, r) for x, r in zip(same, ref)])
            # F32: every token within 1e-4. Q8_0: one token's vector has no mean to average rounding away; the
            # median within 1e-4, 99% within 3e-4.
            assert (d[-1] if wtype == "F32" else d[len(d) // 2]) < 1e-4 and d[int(0.99 * len(d))] < 3e-4, (arch, wtype)
            assert max(cosine_distance(x, r) for x, r in zip(other, ref)) < 2e-3, (arch, wtype, "other path")
            continue
        for t, s, o, r in zip(TEXTS, same, other, ref):
            assert len(s) == len(r) == 128
            assert abs(np.linalg.norm(s) - 1.0) < 1e-6
            assert cosine_distance(s, r) < 1e-4, (arch, POOLINGS[pooling_type], wtype, t)
            assert cosine_distance(o, r) < 2e-3, (arch, POOLINGS[pooling_type], wtype, t, "other path")


def test_a_batch_gives_each_input_its_vector_alone(cachet_bin, tmp_path):
    for pooling_type in POOLINGS:
        path = synth(cachet_bin, tmp_path / f"batch-{pooling_type}.gguf", "qwen3", pooling_type, "Q4_0")
        batched = ours(cachet_bin, path, TEXTS)
        alone = [ours(cachet_bin, path, [t])[0] for t in TEXTS]
        assert batched == alone  # the printed floats, so bitwise


def test_pooling_dimensions_and_normalization_flags(cachet_bin, tmp_path):
    path = synth(cachet_bin, tmp_path / "flags.gguf", "llama", 1)
    raw = np.array(json.loads(ours(cachet_bin, path, ["hello world"], "--no-normalize")[0]))
    unit = np.array(json.loads(ours(cachet_bin, path, ["hello world"])[0]))
    assert abs(np.linalg.norm(raw) - 1.0) > 1e-3
    np.testing.assert_allclose(unit, raw / np.linalg.norm(raw), rtol=1e-5, atol=1e-7)
    cut = np.array(json.loads(ours(cachet_bin, path, ["hello world"], "--dimensions", "32")[0]))
    assert cut.shape == (32,)
    np.testing.assert_allclose(cut, raw[:32] / np.linalg.norm(raw[:32]), rtol=1e-5, atol=1e-7)
    last = json.loads(ours(cachet_bin, path, ["hello world"], "--pooling", "last")[0])
    assert cosine_distance(last, unit) > 1e-3  # another pooling, another vector
    # Longer than the context: an error unless truncation is asked for.
    small = synth(cachet_bin, tmp_path / "small.gguf", "llama", 1, n_ctx=16)
    r = subprocess.run([cachet_bin, "embed", "-m", str(small), "--text", "word " * 40], capture_output=True, text=True)
    assert r.returncode != 0 and "more than the model's context of 16" in r.stderr
    assert len(json.loads(ours(cachet_bin, small, ["word " * 40], "--truncate")[0])) == 128
    # A model whose file names no pooling (no pooling_type written) needs one asked for.
    subprocess.run([cachet_bin, "synth", "--arch", "llama", "-o", str(tmp_path / "nopool.gguf")], check=True)
    plain = tmp_path / "nopool.gguf"
    r = subprocess.run([cachet_bin, "embed", "-m", str(plain), "--text", "hi"], capture_output=True, text=True)
    assert r.returncode != 0 and "names no pooling" in r.stderr
    assert abs(np.linalg.norm(json.loads(ours(cachet_bin, plain, ["hi"], "--pooling", "mean")[0])) - 1) < 1e-6
    # pooling_type 0 is "none": one unit vector per token, whose mean direction is mean pooling's.
    none = synth(cachet_bin, tmp_path / "none.gguf", "llama", 0)
    rows = np.array(json.loads(ours(cachet_bin, none, ["hello world"], "--no-normalize")[0]))
    mean = np.array(json.loads(ours(cachet_bin, none, ["hello world"], "--pooling", "mean", "--no-normalize")[0]))
    assert rows.shape[1] == 128 and rows.shape[0] > 1
    np.testing.assert_allclose(rows.mean(axis=0), mean, rtol=1e-4, atol=1e-5)
    unit = np.array(json.loads(ours(cachet_bin, none, ["hello world"])[0]))
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-6)


@pytest.fixture(scope="module")
def emb_server(cachet_bin, tmp_path_factory):
    path = synth(cachet_bin, tmp_path_factory.mktemp("emb") / "emb-qwen3.gguf", "qwen3", 1, "Q8_0", n_ctx=256)
    s = Server(cachet_bin, path, "--parallel", "16")
    yield s, path
    s.stop()


def test_openai_client_gets_what_cachet_embed_prints(cachet_bin, emb_server):
    server, path = emb_server
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="unused")
    want = [json.loads(line) for line in ours(cachet_bin, path, TEXTS)]
    got = c.embeddings.create(model="emb-qwen3", input=TEXTS, encoding_format="float")
    assert [d.index for d in got.data] == list(range(len(TEXTS)))
    assert [d.embedding for d in got.data] == want
    assert got.usage.prompt_tokens > 0 and got.usage.total_tokens == got.usage.prompt_tokens
    b64 = c.embeddings.create(model="emb-qwen3", input=TEXTS)  # the client asks for base64 and decodes it
    for d, w in zip(b64.data, want):
        assert np.array_equal(np.asarray(d.embedding, dtype=np.float32), np.asarray(w, dtype=np.float32))
    one = c.embeddings.create(model="emb-qwen3", input=TEXTS[0], encoding_format="float")
    assert one.data[0].embedding == want[0]
    cut = c.embeddings.create(model="emb-qwen3", input=TEXTS[:2], dimensions=16, encoding_format="float")
    for d, t in zip(cut.data, TEXTS[:2]):
        assert d.embedding == json.loads(ours(cachet_bin, path, [t], "--dimensions", "16")[0])
    ids = c.embeddings.create(model="emb-qwen3", input=[[1, 2, 3], [4, 5]], encoding_format="float")
    assert len(ids.data) == 2 and len(ids.data[0].embedding) == 128


def test_bad_inputs_get_clear_4xx_and_the_server_keeps_serving(emb_server):
    server, _ = emb_server
    cases = [
        ({"input": ""}, "empty string"),
        ({"input": []}, "empty array"),
        ({"input": [[]]}, "empty token array"),
        ({"input": ["ok"] * 10000}, "at most 2048"),
        ({"input": "word " * 400}, "context"),
        ({"input": [[1, 2, 1 << 20]]}, "outside the vocabulary"),
        ({"input": ["a", [1, 2]]}, "mixes"),
        ({"input": 5}, "must be a string"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "a", "dimensions": 0}, "dimensions"),
        ({"input": "a", "dimensions": 4096}, "more than the model"),
        ({"input": "a", "bogus": 1}, "unknown field"),
        ({"input": "a", "model": "other"}, "does not exist"),
        ({}, "'input' is required"),
    ]
    for body, needle in cases:
        status, payload, _ = server.request("POST", "/v1/embeddings", body)
        assert 400 <= status < 500, (body if len(json.dumps(body)) < 200 else needle, status)
        err = json.loads(payload)["error"]
        assert needle in err["message"], (needle, err)
    status, payload, _ = server.request("POST", "/v1/embeddings", {"input": "word " * 400, "truncate": True})
    assert status == 200 and len(json.loads(payload)["data"]) == 1
    status, payload, _ = server.request("POST", "/v1/embeddings", {"input": ["still", "serving"]})
    assert status == 200 and len(json.loads(payload)["data"]) == 2
