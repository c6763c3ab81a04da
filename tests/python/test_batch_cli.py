"""`cachet run -f FILE --parallel N`: many prompts through the continuous-batching engine from the CLI give,
prompt by prompt, the tokens each gets when it runs alone (greedy), also with a KV pool so small that
requests are preempted and recomputed."""
import json
import subprocess

PROMPTS = ["What is 2+2?", "Name three colors.", "Write a haiku about the sea.", "Say hello in French.",
           "What is the largest planet?", "Count from one to five.", "Why is the sky blue?"]


def run_batch(cachet_bin, model, path, *extra):
    r = subprocess.run([cachet_bin, "run", "-m", str(model), "-f", str(path), "-n", "24", "--format", "json",
                        *extra], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["index"] for row in rows] == list(range(len(PROMPTS)))
    return [row["token_ids"] for row in rows], r.stderr


def test_parallel_equals_one_at_a_time(cachet_bin, default_model, tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n")
    alone, _ = run_batch(cachet_bin, default_model, path, "--parallel", "1")
    together, log = run_batch(cachet_bin, default_model, path, "--parallel", "7")
    assert together == alone
    assert all(len(t) > 0 for t in together)
    # 10 blocks of 16 tokens (3.6 MiB at 22.5 KiB per token): requests admitted on their prompt blocks outgrow
    # the pool while decoding, so the youngest is preempted and recomputed.
    # (Without the prefix cache: the prompts' shared chat-template blocks would otherwise leave room.)
    tight, log = run_batch(cachet_bin, default_model, path, "--parallel", "7", "--kv-memory", "3.6MiB",
                           "--no-prefix-cache")
    assert tight == alone, log
    assert " 0 preemptions" not in log, log
    cached, log = run_batch(cachet_bin, default_model, path, "--parallel", "7", "--kv-memory", "3.6MiB")
    assert cached == alone, log


def test_parallel_needs_a_prompts_file(cachet_bin, default_model):
    r = subprocess.run([cachet_bin, "run", "-m", str(default_model), "--parallel", "4"], capture_output=True, text=True)
    assert r.returncode == 1 and "--prompts-file" in r.stderr, r.stderr
