"""A hybrid model (Qwen3.5-shaped: gated delta nets beside attention) served as a user serves it: concurrent
requests give the ids each gives alone, the recurrent state slots are in /metrics and the dashboard's state, and
`cachet info` / `kv-math` count the state per sequence beside the KV cache."""
import concurrent.futures
import json
import subprocess

import numpy as np
import pytest

from test_server import Server


@pytest.fixture(scope="module")
def hybrid(cachet_bin, tmp_path_factory):
    path = tmp_path_factory.mktemp("hybrid") / "qwen35.gguf"
    subprocess.run([cachet_bin, "synth", "-o", str(path), "--arch", "qwen35", "--type", "Q8_0", "--n-vocab", "320",
                    "--n-embd", "128", "--n-layer", "4", "--n-head", "4", "--n-head-kv", "2", "--head-dim", "32",
                    "--n-ff", "256", "--ssm-head-dim", "32", "--seed", "5"], check=True)
    return path


def completion(server, ids, n):
    status, body, _ = server.request("POST", "/v1/completions", {
        "prompt": ids, "max_tokens": n, "temperature": 0, "ignore_eos": True, "logprobs": 1})
    assert status == 200, body
    return json.loads(body)["choices"][0]["logprobs"]["tokens"]


def test_concurrent_requests_equal_alone_and_state_slots_are_reported(cachet_bin, hybrid):
    rng = np.random.default_rng(2)
    prompts = [rng.integers(3, 320, size=int(rng.integers(5, 90))).tolist() for _ in range(12)]
    s = Server(cachet_bin, hybrid, "--parallel", "4")
    try:
        alone = [completion(s, p, 24) for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            together = list(ex.map(lambda p: completion(s, p, 24), prompts))
        assert together == alone
        m = s.metrics()
        assert m["cachet_state_slots_total"] >= 1
        assert m["cachet_state_checkpoints"] > 0
        assert m["cachet_state_slots_used"] == m["cachet_state_checkpoints"], "a finished request kept its slot"
        assert m["cachet_state_bytes_per_slot"] == 3 * 4 * (3 * (2 * 64 + 128) + 4 * 32 * 32)
        _, state = s.get("/dashboard/state")
        assert json.loads(state)["state_slots_total"] == m["cachet_state_slots_total"]
    finally:
        s.stop()


def test_info_and_kv_math_count_the_state(cachet_bin, hybrid):
    info = json.loads(subprocess.run([cachet_bin, "info", "-m", str(hybrid), "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    # 3 gated delta nets: (kernel 4 - 1) x (q 64 + k 64 + v 128) conv values + 4 heads x 32 x 32, f32.
    per_seq = 3 * 4 * (3 * 256 + 4 * 32 * 32)
    assert info["state_bytes_per_sequence"] == per_seq
    assert info["kv_bytes_per_token"]["f16"] == 2 * 1 * 64 * 2  # one attention layer of 2 x 32-wide KV heads
    km = json.loads(subprocess.run([cachet_bin, "kv-math", "-m", str(hybrid), "--context", "100", "--json"],
                                   check=True, capture_output=True, text=True).stdout)
    assert km["layers"] == 1 and km["state_bytes_per_sequence"] == per_seq
    assert km["bytes_per_sequence"] == 100 * km["bytes_per_token"] + per_seq


def test_a_conversation_resumes_from_a_state_checkpoint(cachet_bin, hybrid):
    """Turn 2 resends turn 1's prompt and more: with the prefix cache it resumes from the checkpoint turn 1 left at
    its prompt's last block boundary (cached_tokens 64 of 70) and answers with exactly the ids a server without the
    cache gives."""
    rng = np.random.default_rng(4)
    turn1 = rng.integers(3, 320, size=70).tolist()
    turn2 = turn1 + rng.integers(3, 320, size=29).tolist()
    answers = {}
    for cache in (True, False):
        s = Server(cachet_bin, hybrid, *([] if cache else ["--no-prefix-cache"]))
        try:
            got = []
            for prompt in (turn1, turn2):
                status, body, _ = s.request("POST", "/v1/completions", {
                    "prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True, "logprobs": 1})
                assert status == 200, body
                out = json.loads(body)
                got.append((out["choices"][0]["logprobs"]["tokens"],
                            (out["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)))
            answers[cache] = got
        finally:
            s.stop()
    assert [t for t, _ in answers[True]] == [t for t, _ in answers[False]]
    assert [c for _, c in answers[False]] == [0, 0]
    assert [c for _, c in answers[True]] == [0, 64]


def test_the_files_own_mtp_head_speculates_through_cli_and_server(cachet_bin, hybrid, tmp_path):
    """A file with a multi-token-prediction block (blk.N.nextn.*): `cachet run --mtp` and a server started with
    --mtp (requests choosing "speculative": "mtp") give the greedy ids they give without speculation, drafts are
    verified and counted; a file without the block, and a server without --mtp, refuse it clearly."""
    path = tmp_path / "qwen35-mtp.gguf"
    subprocess.run([cachet_bin, "synth", "-o", str(path), "--arch", "qwen35", "--type", "Q8_0", "--n-vocab", "320",
                    "--n-embd", "128", "--n-layer", "4", "--n-head", "4", "--n-head-kv", "2", "--head-dim", "32",
                    "--n-ff", "256", "--ssm-head-dim", "32", "--seed", "5", "--mtp", "1"], check=True)
    info = subprocess.run([cachet_bin, "info", "-m", str(path)], check=True, capture_output=True, text=True).stdout
    assert "n_mtp_layers = 1" in info and "n_layer = 4" in info

    def run(model, *flags):
        r = subprocess.run([cachet_bin, "run", "-m", str(model), "--prompt-ids", "5 6 7 8 9 10 5 6 7", "-n", "40",
                            "--temp", "0", "--ignore-eos", "--format", "json", *flags], capture_output=True, text=True)
        return r.returncode, (json.loads(r.stdout) if r.returncode == 0 else r.stderr)

    rc, base = run(path)
    assert rc == 0, base
    rc, got = run(path, "--mtp", "--draft-fixed")
    assert rc == 0, got
    assert got["token_ids"] == base["token_ids"]
    assert got["speculative"]["mode"] == "mtp" and got["speculative"]["proposed"] > 0
    rc, err = run(hybrid, "--mtp")
    assert rc != 0 and "multi-token-prediction" in err

    rng = np.random.default_rng(4)
    prompts = [rng.integers(3, 320, size=int(rng.integers(5, 60))).tolist() for _ in range(8)]
    s = Server(cachet_bin, path, "--parallel", "4", "--mtp", "--draft-fixed")
    try:
        def ask(p, mode):
            status, body, _ = s.request("POST", "/v1/completions", {
                "prompt": p, "max_tokens": 24, "temperature": 0, "ignore_eos": True, "speculative": mode})
            assert status == 200, body
            return json.loads(body)["choices"][0]["text"]

        alone = [ask(p, "off") for p in prompts]
        before = s.metrics("vllm:")
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            together = list(ex.map(lambda p: ask(p, "mtp"), prompts))
        assert together == alone
        after = s.metrics("vllm:")
        assert after["vllm:spec_decode_num_draft_tokens"] > before["vllm:spec_decode_num_draft_tokens"]
    finally:
        s.stop()
    s = Server(cachet_bin, path, "--parallel", "2")
    try:
        status, body, _ = s.request("POST", "/v1/completions", {"prompt": [5, 6], "max_tokens": 2, "speculative": "mtp"})
        assert status == 400 and b"MTP head" in body
    finally:
        s.stop()
