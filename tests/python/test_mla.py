"""An MLA model (deepseek2: the cache holds each token's latent and rotated key, V read from the same rows) served
as a user serves it: concurrent requests give the ids each gives alone, a second turn resumes from the prefix
cache's blocks with the ids a server without the cache gives, and the same holds on a q8_0 cache."""
import concurrent.futures
import json
import subprocess

import numpy as np
import pytest

from test_server import Server


@pytest.fixture(scope="module")
def mla(cachet_bin, tmp_path_factory):
    path = tmp_path_factory.mktemp("mla") / "deepseek2.gguf"
    subprocess.run([cachet_bin, "synth", "-o", str(path), "--arch", "deepseek2", "--type", "Q8_0", "--n-vocab", "320",
                    "--n-embd", "128", "--n-layer", "3", "--n-head", "4", "--head-dim", "32", "--kv-lora", "64",
                    "--mla-rope-dim", "32", "--q-lora", "64", "--experts", "4", "--experts-used", "2", "--n-ff", "64",
                    "--shared-ff", "64", "--dense-lead", "1", "--dense-ff", "256", "--sigmoid-router", "--seed", "5"],
                   check=True)
    return path


def completion(server, ids, n):
    status, body, _ = server.request("POST", "/v1/completions", {
        "prompt": ids, "max_tokens": n, "temperature": 0, "ignore_eos": True, "logprobs": 1})
    assert status == 200, body
    out = json.loads(body)
    return (out["choices"][0]["logprobs"]["tokens"],
            (out["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0))


@pytest.mark.parametrize("kv", ["f16", "q8_0"])
def test_concurrent_requests_and_prefix_cache_keep_the_ids(cachet_bin, mla, kv):
    rng = np.random.default_rng(4)
    prompts = [rng.integers(3, 320, size=int(n)).tolist() for n in (20, 45, 70, 33)]
    turn1 = prompts[2]
    turn2 = turn1 + rng.integers(3, 320, size=29).tolist()
    results = {}
    for cache in (True, False):
        s = Server(cachet_bin, mla, "--kv-type", kv, *([] if cache else ["--no-prefix-cache"]))
        try:
            alone = [completion(s, p, 16)[0] for p in prompts]
            with concurrent.futures.ThreadPoolExecutor(len(prompts)) as ex:
                together = [f.result()[0] for f in [ex.submit(completion, s, p, 16) for p in prompts]]
            assert together == alone, "a request's ids depend on what else shares the batch"
            results[cache] = (alone, completion(s, turn2, 16))
        finally:
            s.stop()
    assert results[True][0] == results[False][0]
    assert results[True][1][0] == results[False][1][0], "resuming from cached latents changed the ids"
    assert results[False][1][1] == 0 and results[True][1][1] >= 64
