"""See inside: kv-math against the seeds' figures, trace against `cachet info`, and the break-it experiments."""
import csv
import json
import pathlib
import subprocess

GiB, MiB = 1 << 30, 1 << 20


def cli_json(cachet_bin, *args):
    return json.loads(subprocess.run([cachet_bin, *args], check=True, capture_output=True, text=True).stdout)


def test_kv_math_reproduces_the_seeds(cachet_bin):
    # 000 §10.2: Llama-2-7B (32 layers, 32 heads x 128), fp16: "about 0.5 MB per token" (0.5 MiB exactly) and
    # "2.1 GB" at 4,096 tokens (2 GiB = 2.147e9 bytes, written in decimal GB).
    j = cli_json(cachet_bin, "kv-math", "--layers", "32", "--kv-heads", "32", "--head-dim", "128", "--context", "4096",
                 "--json")
    assert j["bytes_per_token"] == 524_288 == MiB // 2
    assert j["bytes_per_sequence"] == 2_147_483_648 == 2 * GiB
    # 001: Llama-3-70B with GQA-8 (80 layers, 8 KV heads x 128): "1.28 GB" at 4,096 and "40.96 GB" at 131,072;
    # the table's unit is MiB divided by 1,000 (1,280 MiB and 40,960 MiB).
    j = cli_json(cachet_bin, "kv-math", "--layers", "80", "--kv-heads", "8", "--head-dim", "128", "--context", "4096",
                 "--json")
    assert j["bytes_per_sequence"] == 1_342_177_280 == 1280 * MiB
    j = cli_json(cachet_bin, "kv-math", "--layers", "80", "--kv-heads", "8", "--head-dim", "128", "--context",
                 "131072", "--json")
    assert j["bytes_per_sequence"] == 42_949_672_960 == 40960 * MiB
    # 003: twelve layers, d_model 768, fp16, batch 1, 4,096 tokens: "about 144 MB" (144 MiB).
    j = cli_json(cachet_bin, "kv-math", "--layers", "12", "--d-model", "768", "--context", "4096", "--json")
    assert j["bytes_per_sequence"] == 150_994_944 == 144 * MiB
    # Paging wastes at most the last block; quantization and budgets are exact too.
    j = cli_json(cachet_bin, "kv-math", "--layers", "2", "--kv-heads", "1", "--head-dim", "32", "--context", "17",
                 "--block-size", "16", "--dtype", "q8_0", "--budget-gib", "1", "--weights-gib", "0.5", "--json")
    assert j["bytes_per_token"] == 2 * 2 * 34
    assert j["paged_bytes_per_sequence"] == 32 * 2 * 2 * 34 and j["paged_waste_bytes"] == 15 * 2 * 2 * 34
    assert j["max_sequences"] == (GiB // 2) // (17 * 136)


def test_trace_matches_info_and_the_cache_grows_by_one(cachet_bin, default_model):
    info = cli_json(cachet_bin, "info", "-m", str(default_model), "--json")
    tensors = {t["name"]: t for t in info["tensors"]}
    cfg = info["config"]
    tr = cli_json(cachet_bin, "trace", "-m", str(default_model), "-p", "The capital of France is", "-n", "4", "--json")
    steps = tr["steps"]
    n_prompt = len(tr["prompt_ids"])
    assert steps[0]["phase"] == "prefill" and steps[0]["n_tokens"] == n_prompt
    assert steps[0]["kv_before"] == 0 and steps[0]["kv_after"] == n_prompt
    assert len(steps) == 5
    for prev, st in zip(steps, steps[1:]):
        assert st["phase"] == "decode" and st["n_tokens"] == 1
        assert st["kv_before"] == prev["kv_after"] and st["kv_after"] == st["kv_before"] + 1
    for st in steps:
        matmuls = 0
        for op in st["ops"]:
            if op["weight"]:
                t = tensors[op["weight"]]
                assert op["weight_shape"] == t["shape"] and op["weight_type"] == t["type"], op
            if op["op"] in ("matmul", "lm_head"):
                matmuls += 1
                n_in, n_out = op["weight_shape"]
                assert op["in"] == [op["in"][0], n_in] and op["out"] == [op["in"][0], n_out], op
            if op["op"] == "attention":
                assert op["in"] == [st["n_tokens"], cfg["n_head"], cfg["head_dim"]]
        assert matmuls == 7 + 1  # q, k, v, o, gate, up, down of one layer, and the head
        assert st["layers"] == cfg["n_layer"]


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_break_experiments_diverge_only_after_the_corruption(cachet_bin, default_model, tmp_path):
    after = 8
    subprocess.run([cachet_bin, "break", "-m", str(default_model), "-p", "The history of the Roman Empire",
                    "--after", str(after), "-n", "24", "-o", str(tmp_path)], check=True, capture_output=True)
    rows = read_csv(tmp_path / "break.csv")
    assert len(rows) == 24
    for kind in ("random-key", "shifted-write"):
        before = [r for r in rows if int(r["step"]) < after]
        later = [r for r in rows if int(r["step"]) >= after]
        assert all(float(r[f"{kind}_kl"]) == 0.0 and r[f"{kind}_agree"] == "1" for r in before), kind
        assert sum(float(r[f"{kind}_kl"]) for r in later) / len(later) > 0.01, kind
        assert any(r[f"{kind}_agree"] == "0" for r in later), kind
    assert (tmp_path / "break.png").stat().st_size > 1000

    subprocess.run([cachet_bin, "break", "-m", str(default_model), "-p", "Once upon a time,", "--after", "3", "-n", "12",
                    "--experiment", "none", "-o", str(tmp_path / "none")], check=True, capture_output=True)
    for r in read_csv(tmp_path / "none" / "break.csv"):
        assert float(r["none_kl"]) == 0.0 and r["none_agree"] == "1"
