"""cachet's logits and greedy ids against the independent numpy reference (tests/oracle/reference.py).

The 1e-3 agreement is checked with `--precise` (f32 activations in every matmul); the default path, which
quantizes activations to 8 bits for the block types, is held to bounds taken from llama.cpp's own
deviation (docs/numerics.md)."""
import json
import os
import subprocess

import numpy as np
import pytest

from reference import Model

TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
         "IQ4_NL", "IQ4_XS"]
K_QUANTS = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"}  # 256-element super-blocks


def our_logits(cachet_bin, model, ids, tmp_path, kv="f32", precise=True, isa=None):
    out = tmp_path / "logits.f32"
    env = dict(os.environ, CACHET_ISA=isa) if isa else None
    subprocess.run([cachet_bin, "logits", "-m", str(model), "--prompt-ids", " ".join(map(str, ids)),
                    "-o", str(out), "--kv-type", kv] + (["--precise"] if precise else []), check=True, env=env)
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), -1)


def cpu_tables(cachet_bin):
    """{table name: how it computes with F16/BF16 weights ("bf16" or "f32")} for every table this CPU runs."""
    out = {}
    for isa in json.loads(subprocess.run([cachet_bin, "info", "--cpu", "--json"], check=True, capture_output=True,
                                         text=True).stdout)["tables"]:
        j = json.loads(subprocess.run([cachet_bin, "info", "--cpu", "--json"], check=True, capture_output=True,
                                      text=True, env=dict(os.environ, CACHET_ISA=isa)).stdout)
        out[isa] = j["float_weights"]
    return out


def assert_agrees(ours, ref, what):
    scale = np.abs(ref).max()
    diff = np.abs(ours - ref).max()
    assert diff <= 1e-3 * scale, f"{what}: max |diff| {diff:.3g} > 1e-3 x max |logit| {scale:.3g}"
    mismatch = np.nonzero(ours.argmax(axis=1) != ref.argmax(axis=1))[0]
    assert len(mismatch) == 0, f"{what}: argmax differs at positions {mismatch.tolist()}"


@pytest.mark.parametrize("wtype", TYPES)
@pytest.mark.parametrize("layout", ["gqa", "neox-untied"])
def test_synthetic_logits_match_numpy(cachet_bin, tmp_path, wtype, layout):
    path = synth(cachet_bin, tmp_path, wtype, layout)
    ids = np.random.default_rng(3).integers(0, 320, size=32).tolist()
    m = Model.load(str(path))
    m.quantize_activations = False
    ref = m.logits(ids)
    assert_agrees(our_logits(cachet_bin, path, ids, tmp_path), ref, f"{wtype} {layout}")


def synth(cachet_bin, tmp_path, wtype, layout):
    path = tmp_path / f"synth_{wtype}_{layout}.gguf"
    wide = wtype in K_QUANTS  # K-quant rows are whole 256-element super-blocks
    cmd = [cachet_bin, "synth", "-o", str(path), "--type", wtype, "--embd-type", wtype, "--n-vocab", "320",
           "--n-embd", "256" if wide else "128", "--n-layer", "3", "--n-head", "8", "--n-head-kv", "2",
           "--n-ff", "512" if wide else "256", "--seed", "7"]
    if layout == "neox-untied":
        cmd += ["--neox", "--untied"]
    subprocess.run(cmd, check=True)
    return path


def int8_deviation(ours, ref):
    scale = np.abs(ref).max()
    return (np.abs(ours - ref).max() / scale, np.abs(ours - ref).mean() / scale,
            int((ours.argmax(axis=1) == ref.argmax(axis=1)).sum()))


# The default (fast) path quantizes activations to 8 bits for the block types, as llama.cpp does, so it
# cannot match an f32 reference to 1e-3 (docs/numerics.md). These bounds are set from llama.cpp's own
# deviation on the default model (max 4.9%, mean 0.54% of max |logit|, argmax 30/32; measured side by side).
# Every table this CPU runs: the AVX2 one quantizes the activations of K-type weights per 256-element
# super-block (kernels/packed.h, KSums::kPerSuper), as llama.cpp's Q8_K does, and must keep the same bounds.
@pytest.mark.parametrize("wtype", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                                   "IQ4_NL", "IQ4_XS"])
def test_synthetic_int8_path_stays_close_to_numpy(cachet_bin, tmp_path, wtype):
    path = synth(cachet_bin, tmp_path, wtype, "gqa")
    ids = np.random.default_rng(3).integers(0, 320, size=32).tolist()
    m = Model.load(str(path))
    m.quantize_activations = False
    ref = m.logits(ids)
    for isa in cpu_tables(cachet_bin):
        worst, mean, agree = int8_deviation(our_logits(cachet_bin, path, ids, tmp_path, precise=False, isa=isa), ref)
        assert worst <= 0.03 and mean <= 0.005 and agree >= 30, (isa, worst, mean, agree)


# F16 and BF16 weights run in bf16 on the default path of the AVX512_BF16 table (weights and activations rounded
# to bf16, f32 sums, docs/quantize.md); every other table keeps them exact and computes in f32. Each table this
# CPU runs is checked. bf16: against the reference that rounds the same way the gap is float rounding until an
# activation lies within float error of a bf16 rounding boundary (numpy sums in f64): then the two round it one
# bf16 step (2^-8) apart and every later position moves with it. So: much closer to that reference than the f32
# reference is, and within the int8 path's bounds of the f32 reference. f32: the 1e-3 agreement of --precise.
@pytest.mark.parametrize("wtype", ["F16", "BF16"])
def test_synthetic_float_path_matches_numpy_on_every_table(cachet_bin, tmp_path, wtype):
    path = synth(cachet_bin, tmp_path, wtype, "gqa")
    ids = np.random.default_rng(3).integers(0, 320, size=32).tolist()
    m = Model.load(str(path))
    m.quantize_activations = False
    exact = m.logits(ids)
    m.quantize_activations = True
    rounded = m.logits(ids)
    tables = cpu_tables(cachet_bin)
    assert "scalar" in tables and all(v in ("bf16", "f32") for v in tables.values()), tables
    for isa, arith in tables.items():
        ours = our_logits(cachet_bin, path, ids, tmp_path, precise=False, isa=isa)
        if arith == "f32":
            assert_agrees(ours, exact, f"{wtype} on {isa}")
            continue
        gap, effect = np.abs(ours - rounded).mean(), np.abs(rounded - exact).mean()
        assert gap <= 0.3 * effect, (wtype, isa, gap, effect)
        assert (ours.argmax(axis=1) == rounded.argmax(axis=1)).all(), isa
        worst, mean, agree = int8_deviation(ours, exact)
        assert worst <= 0.03 and mean <= 0.005 and agree >= 30, (isa, worst, mean, agree)


def test_default_model_int8_path_stays_close_to_numpy(cachet_bin, default_model, tmp_path):
    ids = np.random.default_rng(3).integers(0, 49152, size=32).tolist()
    m = Model.load(default_model)
    m.quantize_activations = False
    worst, mean, agree = int8_deviation(our_logits(cachet_bin, default_model, ids, tmp_path, precise=False),
                                        m.logits(ids))
    assert worst <= 0.08 and mean <= 0.015 and agree >= 28, (worst, mean, agree)
    # Against the reference that rounds activations the same way, the gap is float rounding plus the
    # occasional flipped rounding decision, which this model amplifies (docs/numerics.md).
    m.quantize_activations = True
    worst, mean, agree = int8_deviation(our_logits(cachet_bin, default_model, ids, tmp_path, precise=False),
                                        m.logits(ids))
    assert mean <= 0.015 and agree >= 29, (worst, mean, agree)


def test_default_model_logits_match_numpy(cachet_bin, default_model, tmp_path):
    # 32 tokens of a real chat prompt's ids (SmolLM2 vocabulary).
    ids = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712,
           8182, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2]
    m = Model.load(default_model)
    m.quantize_activations = False
    ref = m.logits(ids)
    assert_agrees(our_logits(cachet_bin, default_model, ids, tmp_path), ref, "SmolLM2-135M Q4_1")
    # And with the default f16 KV cache, against the reference rounding K and V the same way. Rounding to f16
    # is a step function: a K or V element within 1e-7 of a rounding boundary lands one f16 ulp apart in the
    # two implementations, and this model amplifies such flips (measured: up to 0.07 across our ISAs, as
    # large as the whole f16-vs-f32 effect). So the bound is the size of that effect in the reference
    # itself, with identical argmax everywhere; the f32 comparison above is the tight one.
    ref16 = m.logits(ids, kv_f16=True)
    ours16 = our_logits(cachet_bin, default_model, ids, tmp_path, kv="f16")
    effect = np.abs(ref16 - ref)
    diff = np.abs(ours16 - ref16)
    assert diff.max() <= 2 * effect.max() and diff.mean() <= 2 * effect.mean(), (diff.max(), effect.max())
    assert (ours16.argmax(axis=1) == ref16.argmax(axis=1)).all()


def test_stories260k_greedy_200_matches_numpy(cachet_bin, shared_dir):
    path = shared_dir / "models" / "stories260K.bin"
    out = subprocess.run([cachet_bin, "run", "-m", str(path), "--prompt-ids", "1", "-n", "200", "--ignore-eos",
                          "--kv-type", "f32", "--format", "json"], check=True, capture_output=True, text=True)
    ours = json.loads(out.stdout)["token_ids"]
    ref = Model.load(str(path)).greedy([1], 200)
    assert len(ours) == 200
    first_diff = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), None)
    assert first_diff is None, f"first difference at token {first_diff}: ours {ours[first_diff]}, numpy {ref[first_diff]}"


def test_run_no_kv_cache_gives_the_same_ids(cachet_bin, shared_dir):
    path = shared_dir / "models" / "stories260K.bin"
    runs = []
    for flag in ([], ["--no-kv-cache"]):
        out = subprocess.run([cachet_bin, "run", "-m", str(path), "--prompt-ids", "1 400 300", "-n", "64",
                              "--ignore-eos", "--format", "json"] + flag, check=True, capture_output=True, text=True)
        runs.append(json.loads(out.stdout))
    assert runs[0]["token_ids"] == runs[1]["token_ids"]
    assert runs[0]["kv_cache"] is True and runs[1]["kv_cache"] is False


def run_ids(cachet_bin, model, *flags):
    out = subprocess.run([cachet_bin, "run", "-m", str(model), "--prompt-ids", "1 9690 198 2683 359 253", "-n", "48",
                          "--ignore-eos", "--format", "json", *flags], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["token_ids"]


def test_same_seed_same_tokens_across_runs_and_threads(cachet_bin, default_model):
    flags = ["--temp", "0.9", "--top-p", "0.95", "--top-k", "50", "--min-p", "0.02", "--repeat-penalty", "1.1"]
    a = run_ids(cachet_bin, default_model, *flags, "--seed", "42", "-t", "1")
    b = run_ids(cachet_bin, default_model, *flags, "--seed", "42", "-t", "2")
    c = run_ids(cachet_bin, default_model, *flags, "--seed", "42", "-t", "2")
    d = run_ids(cachet_bin, default_model, *flags, "--seed", "43", "-t", "2")
    assert a == b == c
    assert a != d


def test_invalid_sampling_flags_are_errors(cachet_bin, default_model):
    for flags, phrase in [(["--top-p", "0"], "top_p"), (["--temp", "-1"], "temperature"),
                          (["--logit-bias", "999999=1"], "outside the vocabulary"), (["--min-p", "2"], "min_p")]:
        r = subprocess.run([cachet_bin, "run", "-m", str(default_model), "--prompt-ids", "1 2", "-n", "2", *flags],
                           capture_output=True, text=True)
        assert r.returncode == 1, flags
        assert phrase in r.stderr, (flags, r.stderr)
