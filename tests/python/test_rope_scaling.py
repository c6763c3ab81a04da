"""RoPE scaling (context extension) against llama.cpp: synthetic files with each scaling type in their metadata,
and the same types from the command line, give the logits llama.cpp gives within 2e-3 of the largest logit at
positions past the original context. The schemes are not vacuous: each changes the logits far beyond that.

Both rotations (llama's interleaved pairs, qwen2's NeoX halves) and YaRN's attention factor are covered.
"""
import subprocess

import llama_cpp  # a hard dependency of this suite: a missing oracle fails, never skips
import numpy as np
import pytest

N_VOCAB = 320
ORIG = 48        # the "trained" context the scaling extends
N_CTX = 256      # the file's context_length
N_PROMPT = 160   # positions 0..159: most of them past ORIG


def synth(cachet_bin, tmp_path, arch, extra=()):
    path = tmp_path / f"{arch}_{'_'.join(extra) or 'plain'}.gguf".replace("-", "")
    subprocess.run([cachet_bin, "synth", "-o", str(path), "--arch", arch, "--type", "F32", "--embd-type", "F32",
                    "--n-vocab", str(N_VOCAB), "--n-embd", "128", "--n-layer", "2", "--n-head", "4",
                    "--n-head-kv", "2", "--n-ff", "256", "--n-ctx", str(N_CTX), "--seed", "11", "--untied",
                    *extra], check=True)
    return path


def ours(cachet_bin, path, ids, tmp_path, flags=()):
    out = tmp_path / "logits.f32"
    subprocess.run([cachet_bin, "logits", "-m", str(path), "--prompt-ids", " ".join(map(str, ids)), "-o", str(out),
                    "--kv-type", "f32", "--precise", *flags], check=True)
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), -1).astype(np.float64)


def theirs(path, ids, **kw):
    llm = llama_cpp.Llama(str(path), n_ctx=N_CTX, n_batch=N_CTX, logits_all=True, verbose=False, n_threads=2, **kw)
    llm.eval(ids)
    out = np.array(llm.scores[: len(ids)], dtype=np.float64)
    del llm
    return out


def prompt():
    return np.random.default_rng(5).integers(3, N_VOCAB, size=N_PROMPT).tolist()


def assert_close(a, b, what):
    past = slice(ORIG, None)  # the positions the scaling is for
    scale = np.abs(b[past]).max()
    diff = np.abs(a[past] - b[past]).max()
    assert diff <= 2e-3 * scale, f"{what}: max |diff| {diff:.3g} > 2e-3 x {scale:.3g} past position {ORIG}"


def changed(a, b):
    return np.abs(a[ORIG:] - b[ORIG:]).max() / np.abs(b[ORIG:]).max()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("kind", ["linear", "yarn"])
def test_scaling_from_the_file_matches_llama_cpp(cachet_bin, tmp_path, arch, kind):
    ids = prompt()
    plain = ours(cachet_bin, synth(cachet_bin, tmp_path, arch), ids, tmp_path)
    extra = ["--rope-scaling", kind, "--rope-scale", "4", "--rope-orig-ctx", str(ORIG)]
    if kind == "yarn":
        extra += ["--rope-attn-factor", "0.9"]  # the file's attention factor multiplies YaRN's temperature
    path = synth(cachet_bin, tmp_path, arch, extra)
    a = ours(cachet_bin, path, ids, tmp_path)
    assert_close(a, theirs(path, ids), f"{arch} {kind} from the file")
    assert changed(a, plain) > 0.05, f"{kind} scaling barely changes the logits: the test would not see it"


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_scaling_from_flags_matches_llama_cpp(cachet_bin, tmp_path, arch):
    ids = prompt()
    path = synth(cachet_bin, tmp_path, arch)
    plain = ours(cachet_bin, path, ids, tmp_path)
    # YaRN from flags on a file without scaling.
    a = ours(cachet_bin, path, ids, tmp_path,
             ["--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", str(ORIG)])
    b = theirs(path, ids, rope_scaling_type=llama_cpp.LLAMA_ROPE_SCALING_TYPE_YARN, rope_freq_scale=0.25,
               yarn_orig_ctx=ORIG)
    assert_close(a, b, f"{arch} yarn from flags")
    assert changed(a, plain) > 0.05
    # YaRN's correction range from flags.
    a = ours(cachet_bin, path, ids, tmp_path, ["--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx",
                                               str(ORIG), "--yarn-beta-fast", "16", "--yarn-beta-slow", "2"])
    b = theirs(path, ids, rope_scaling_type=llama_cpp.LLAMA_ROPE_SCALING_TYPE_YARN, rope_freq_scale=0.25,
               yarn_orig_ctx=ORIG, yarn_beta_fast=16.0, yarn_beta_slow=2.0)
    assert_close(a, b, f"{arch} yarn betas from flags")
    # Linear from flags.
    a = ours(cachet_bin, path, ids, tmp_path, ["--rope-scaling", "linear", "--rope-scale", "3"])
    b = theirs(path, ids, rope_scaling_type=llama_cpp.LLAMA_ROPE_SCALING_TYPE_LINEAR, rope_freq_scale=1 / 3)
    assert_close(a, b, f"{arch} linear from flags")
    # NTK-aware: a base change, which llama.cpp takes as --rope-freq-base.
    head_dim = 128 // 4
    base = 10000.0 * 4.0 ** (head_dim / (head_dim - 2))
    a = ours(cachet_bin, path, ids, tmp_path, ["--rope-scaling", "ntk", "--rope-scale", "4"])
    b = theirs(path, ids, rope_freq_base=base)
    assert_close(a, b, f"{arch} ntk from flags")
    assert changed(a, plain) > 0.05


def test_yarn_file_overridden_back_to_none(cachet_bin, tmp_path):
    ids = prompt()
    plain = ours(cachet_bin, synth(cachet_bin, tmp_path, "llama"), ids, tmp_path)
    path = synth(cachet_bin, tmp_path, "llama", ["--rope-scaling", "yarn", "--rope-scale", "4", "--rope-orig-ctx",
                                                 str(ORIG)])
    a = ours(cachet_bin, path, ids, tmp_path, ["--rope-scaling", "none"])
    assert np.abs(a - plain).max() <= 1e-6 * np.abs(plain).max()


def test_bad_flags_are_refused(cachet_bin, tmp_path):
    path = synth(cachet_bin, tmp_path, "llama")
    for flags in (["--rope-scale", "0"], ["--rope-scale", "-2"], ["--rope-freq-base", "0"],
                  ["--rope-scaling", "longrope"], ["--yarn-orig-ctx", "0"]):
        r = subprocess.run([cachet_bin, "logits", "-m", str(path), "--prompt-ids", "1 2 3", "-o",
                            str(tmp_path / "x.f32"), *flags], capture_output=True, text=True)
        assert r.returncode != 0, flags
        assert "error" in (r.stderr + r.stdout).lower() or "rope" in (r.stderr + r.stdout).lower(), flags
