"""The quantized types against PyPI `gguf`'s own numpy decoders (an independent reading of ggml's layouts),
and `cachet quantize` / `cachet perplexity` end to end."""
import json
import subprocess

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize

from reference import Model

# Block bytes and the byte offsets of each block's fp16 scale fields.
LAYOUTS = {
    "Q8_0": (34, [0]), "Q4_0": (18, [0]), "Q4_1": (20, [0, 2]), "Q5_0": (22, [0]), "Q5_1": (24, [0, 2]),
    "Q2_K": (84, [80, 82]), "Q3_K": (110, [108]), "Q4_K": (144, [0, 2]), "Q5_K": (176, [0, 2]),
    "Q6_K": (210, [208]), "IQ4_NL": (18, [0]), "IQ4_XS": (136, [0]),
    "MXFP4": (17, []),  # its scale is a byte (E8M0): every value is one
}


def random_blocks(qtype, rows, cols, rng):
    """Random bytes in `qtype`'s block layout, with finite fp16 scales (of both signs) where the scales sit."""
    block_bytes, scale_offsets = LAYOUTS[qtype]
    block_elems = gguf.GGML_QUANT_SIZES[getattr(gguf.GGMLQuantizationType, qtype)][0]
    n_blocks = rows * cols // block_elems
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in scale_offsets:
        scales = (rng.standard_normal(n_blocks) * 0.02).astype(np.float16)
        raw[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(rows, cols // block_elems * block_bytes)


def test_every_block_type_decodes_as_gguf_py_does(cachet_bin, tmp_path):
    rng = np.random.default_rng(11)
    path = tmp_path / "blocks.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    tensors = {}
    for qtype in LAYOUTS:
        raw = random_blocks(qtype, 3, 512, rng)
        tensors[qtype] = raw
        w.add_tensor(f"t.{qtype}", raw, raw_dtype=getattr(gguf.GGMLQuantizationType, qtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for qtype, raw in tensors.items():
        out = tmp_path / f"{qtype}.f32"
        subprocess.run([cachet_bin, "tensor", "-m", str(path), f"t.{qtype}", "-o", str(out)], check=True,
                       capture_output=True)
        ours = np.fromfile(out, dtype=np.float32).reshape(3, 512)
        want = dequantize(raw, getattr(gguf.GGMLQuantizationType, qtype)).reshape(3, 512)
        np.testing.assert_allclose(ours, want, rtol=2e-6, atol=1e-9, err_msg=qtype)


def quantize(cachet_bin, src, dst, qtype):
    out = subprocess.run([cachet_bin, "quantize", "-m", str(src), "-o", str(dst), "--type", qtype], check=True,
                         capture_output=True, text=True).stdout
    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(dst)).tensors}, out


def synth_f16(cachet_bin, path, embd=256, layers=8, heads=4, kv_heads=2, seed=5, extra=()):
    """A synthetic F16 model (n_vocab 320, n_ff 512) for the quantize tests, written to `path`."""
    subprocess.run([cachet_bin, "synth", "-o", str(path), "--type", "F16", "--n-vocab", "320", "--n-embd", str(embd),
                    "--n-layer", str(layers), "--n-head", str(heads), "--n-head-kv", str(kv_heads), "--n-ff", "512",
                    "--seed", str(seed)] + list(extra), check=True)
    return path


def test_quantize_mixes_follow_llama_cpp(cachet_bin, tmp_path):
    # A 256-wide model, so the K-quants apply everywhere but the 1-D norms; 8 layers for the _M rule.
    src = synth_f16(cachet_bin, tmp_path / "f16.gguf")
    types, _ = quantize(cachet_bin, src, tmp_path / "q4km.gguf", "Q4_K_M")
    # llama.cpp's use_more_bits for 8 layers: i < 1, i >= 7, (i - 1) % 3 == 2 -> layers 0, 3, 6, 7.
    for i in range(8):
        more = i in (0, 3, 6, 7)
        assert types[f"blk.{i}.attn_v.weight"] == ("Q6_K" if more else "Q4_K"), i
        assert types[f"blk.{i}.ffn_down.weight"] == ("Q6_K" if more else "Q4_K"), i
        assert types[f"blk.{i}.attn_q.weight"] == "Q4_K"
        assert types[f"blk.{i}.attn_norm.weight"] == "F32"
    assert types["token_embd.weight"] == "Q6_K"  # tied: it is also the output head
    types, _ = quantize(cachet_bin, src, tmp_path / "q8.gguf", "Q8_0")
    assert {t for n, t in types.items() if n.endswith(".weight") and "norm" not in n} == {"Q8_0"}
    # Rows that are not whole super-blocks fall back as llama.cpp does (Q4_K -> Q5_0, Q6_K -> Q8_0).
    narrow = synth_f16(cachet_bin, tmp_path / "narrow.gguf", embd=192, layers=2)
    types, _ = quantize(cachet_bin, narrow, tmp_path / "narrow_q4km.gguf", "Q4_K_M")
    # 2 layers: only layer 1 (i >= 7n/8) gets more bits.
    assert types["blk.0.attn_q.weight"] == "Q5_0" and types["blk.0.attn_v.weight"] == "Q5_0"
    assert types["blk.1.attn_v.weight"] == "Q8_0"  # Q6_K, 192 wide
    assert types["blk.0.ffn_down.weight"] == "Q4_K" and types["blk.1.ffn_down.weight"] == "Q6_K"  # 512 wide


def test_quantize_mixes_of_the_other_architectures_follow_llama_cpp(cachet_bin, tmp_path):
    """llama.cpp's llama_tensor_get_type for experts, routers and fused QKV."""
    def synth(name, *args):
        return synth_f16(cachet_bin, tmp_path / f"{name}.gguf", extra=args)
    types, _ = quantize(cachet_bin, synth("moe", "--arch", "qwen3moe", "--experts", "4", "--experts-used", "2",
                                          "--head-dim", "64"), tmp_path / "moe_q4km.gguf", "Q4_K_M")
    for i in range(8):
        more = i in (0, 3, 6, 7)
        assert types[f"blk.{i}.ffn_gate_inp.weight"] == "F32"  # routers are never quantized (synth writes F32)
        assert types[f"blk.{i}.ffn_down_exps.weight"] == ("Q6_K" if more else "Q4_K"), i  # ffn_down's rule
        assert types[f"blk.{i}.ffn_gate_exps.weight"] == "Q4_K"
        assert types[f"blk.{i}.attn_k.weight"] == "Q4_K"
    types, _ = quantize(cachet_bin, synth("mixtral", "--experts", "8", "--experts-used", "2"),
                        tmp_path / "mixtral_q4km.gguf", "Q4_K_M")
    assert types["blk.1.attn_v.weight"] == "Q8_0" and types["blk.1.attn_k.weight"] == "Q8_0"  # 8 experts
    assert types["blk.1.attn_output.weight"] == "Q5_K"
    types, _ = quantize(cachet_bin, synth("phi3", "--arch", "phi3"), tmp_path / "phi3_q4km.gguf", "Q4_K_M")
    assert types["blk.2.attn_qkv.weight"] == "Q5_K"
    assert types["blk.2.ffn_up.weight"] == "Q4_K"


def test_quantize_iq4_mixes_follow_llama_cpp(cachet_bin, tmp_path):
    """llama.cpp's IQ4_NL / IQ4_XS mixes without an importance matrix: Q5_K for the first eighth's ffn_down and,
    with 4+ query heads per KV head, for attn_v; IQ4_XS rows that are not whole super-blocks as IQ4_NL."""
    def synth(name, embd, heads, kv_heads):
        return synth_f16(cachet_bin, tmp_path / f"{name}.gguf", embd=embd, heads=heads, kv_heads=kv_heads)
    for qtype in ["IQ4_XS", "IQ4_NL"]:
        for heads, kv_heads in [(4, 2), (8, 2)]:
            types, _ = quantize(cachet_bin, synth(f"g{heads}", 256, heads, kv_heads), tmp_path / "q.gguf", qtype)
            for i in range(8):
                assert types[f"blk.{i}.attn_v.weight"] == ("Q5_K" if heads // kv_heads >= 4 else qtype), (qtype, i)
                assert types[f"blk.{i}.ffn_down.weight"] == ("Q5_K" if i < 1 else qtype), (qtype, i)
                assert types[f"blk.{i}.attn_q.weight"] == qtype and types[f"blk.{i}.ffn_up.weight"] == qtype
            assert types["token_embd.weight"] == "Q6_K"  # tied: the output head
        types, _ = quantize(cachet_bin, synth("narrow", 192, 4, 2), tmp_path / "n.gguf", qtype)
        assert types["blk.0.attn_q.weight"] == "IQ4_NL" and types["blk.1.ffn_up.weight"] == "IQ4_NL", qtype
        assert types["blk.0.ffn_down.weight"] == "Q5_K" and types["blk.1.ffn_down.weight"] == qtype  # 512 wide
        assert types["token_embd.weight"] == "Q8_0"  # Q6_K, 192 wide


def test_quantize_mxfp4_moe_follows_llama_cpp_and_rounds_no_worse(cachet_bin, tmp_path):
    """llama.cpp's MXFP4_MOE: the experts' 3-D tensors MXFP4, every other matrix Q8_0, routers and norms as they
    are. The experts decode (gguf-py) to no larger an error than gguf-py's own MXFP4 quantizer (llama.cpp's
    rule) gives on the same weights, and the model runs."""
    src = synth_f16(cachet_bin, tmp_path / "moe.gguf", extra=("--arch", "qwen3moe", "--experts", "4",
                                                               "--experts-used", "2", "--head-dim", "64"))
    dst = tmp_path / "mxfp4.gguf"
    types, _ = quantize(cachet_bin, src, dst, "MXFP4_MOE")
    for i in range(8):
        for part in ("gate", "up", "down"):
            assert types[f"blk.{i}.ffn_{part}_exps.weight"] == "MXFP4", (i, part)
        assert types[f"blk.{i}.attn_q.weight"] == "Q8_0" and types[f"blk.{i}.attn_v.weight"] == "Q8_0"
        assert types[f"blk.{i}.ffn_gate_inp.weight"] == "F32"
    assert types["token_embd.weight"] == "Q8_0"
    before = {t.name: t for t in gguf.GGUFReader(str(src)).tensors}
    ours_err = ref_err = 0.0
    for t in gguf.GGUFReader(str(dst)).tensors:
        if t.tensor_type.name != "MXFP4":
            continue
        w = np.asarray(before[t.name].data, dtype=np.float32).reshape(-1, int(t.shape[0]))
        ours = dequantize(np.asarray(t.data), gguf.GGMLQuantizationType.MXFP4).reshape(w.shape)
        ref = dequantize(gguf.quants.quantize(w, gguf.GGMLQuantizationType.MXFP4), gguf.GGMLQuantizationType.MXFP4)
        ours_err += float(((ours - w) ** 2).sum())
        ref_err += float(((ref.reshape(w.shape) - w) ** 2).sum())
    assert 0 < ours_err <= ref_err, (ours_err, ref_err)
    out = subprocess.run([cachet_bin, "run", "-m", str(dst), "-p", "a b c", "-n", "4", "--temp", "0"],
                         check=True, capture_output=True, text=True)
    assert out.returncode == 0


def test_quantize_low_bit_k_mixes_follow_llama_cpp(cachet_bin, tmp_path):
    """llama.cpp's Q2_K, Q3_K_S/M/L and Q4_K_S mixes without an importance matrix (its
    llama_tensor_get_type), on 8 layers at 2 and 4 query heads per KV head; rows that are not whole super-blocks
    as Q4_0."""
    def synth(name, embd, heads, kv_heads):
        return synth_f16(cachet_bin, tmp_path / f"{name}.gguf", embd=embd, heads=heads, kv_heads=kv_heads)
    # (mix, gqa) -> per layer i: (attn_v, ffn_down, attn_output, everything else)
    def want(mix, gqa, i):
        base = "Q2_K" if mix == "Q2_K" else "Q3_K" if mix.startswith("Q3") else "Q4_K"
        if mix == "Q2_K":
            return ("Q4_K" if gqa >= 4 else "Q3_K"), "Q3_K", "Q3_K", base
        if mix == "Q3_K_S":
            return base, base, base, base
        if mix == "Q3_K_M":  # ffn_down: Q5_K below n_layer / 16 = 0 layers, Q4_K above
            return ("Q5_K" if i < 2 else "Q4_K"), "Q4_K", "Q4_K", base
        if mix == "Q3_K_L":
            return "Q5_K", "Q5_K", "Q5_K", base
        assert mix == "Q4_K_S"
        return ("Q5_K" if i < 4 else base), ("Q5_K" if i < 1 else base), base, base
    for heads, kv_heads in [(4, 2), (8, 2)]:
        src = synth(f"g{heads}", 256, heads, kv_heads)
        for mix in ["Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S"]:
            types, _ = quantize(cachet_bin, src, tmp_path / "q.gguf", mix)
            for i in range(8):
                v, down, o, rest = want(mix, heads // kv_heads, i)
                got = tuple(types[f"blk.{i}.{n}.weight"] for n in ["attn_v", "ffn_down", "attn_output", "attn_q"])
                assert got == (v, down, o, rest), (mix, heads, i, got)
                assert types[f"blk.{i}.ffn_up.weight"] == rest and types[f"blk.{i}.attn_k.weight"] == rest
            assert types["token_embd.weight"] == "Q6_K", mix  # tied: the output head
    types, _ = quantize(cachet_bin, synth("narrow", 192, 4, 2), tmp_path / "n.gguf", "Q3_K_M")
    assert types["blk.0.attn_q.weight"] == "Q4_0" and types["blk.3.attn_v.weight"] == "Q5_0"  # Q3_K, Q4_K
    assert types["blk.1.attn_v.weight"] == "Q5_1"  # Q5_K
    assert types["blk.3.ffn_down.weight"] == "Q4_K"  # 512 wide
    types, _ = quantize(cachet_bin, synth("narrow", 192, 4, 2), tmp_path / "n.gguf", "Q2_K")
    assert types["blk.0.attn_q.weight"] == "Q4_0" and types["blk.0.attn_v.weight"] == "Q4_0"
    # --pure: no mix, the output head included (llama-quantize --pure); Q2_K_S needs an importance matrix.
    subprocess.run([cachet_bin, "quantize", "-m", str(src), "-o", str(tmp_path / "p.gguf"), "--type", "Q3_K_M",
                    "--pure"], check=True, capture_output=True)
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(tmp_path / "p.gguf")).tensors}
    assert {t for n, t in types.items() if "norm" not in n} == {"Q3_K"}, types
    assert subprocess.run([cachet_bin, "quantize", "-m", str(src), "-o", str(tmp_path / "x.gguf"), "--type",
                           "Q2_K_S"], capture_output=True).returncode != 0


def test_quantized_models_stay_close_to_their_f16_source(cachet_bin, tmp_path):
    """Logits of each quantized file against the f16 source, all through the numpy reference: the quantizer's
    own error, bounded and ordered by bits."""
    src = synth_f16(cachet_bin, tmp_path / "f16.gguf", layers=2, seed=9)
    ids = np.random.default_rng(1).integers(0, 320, size=24).tolist()
    ref = Model.load(str(src))
    ref.quantize_activations = False
    a = ref.logits(ids)
    err = {}
    for qtype in ["Q8_0", "Q6_K", "Q5_K_M", "Q5_0", "Q4_K_M", "IQ4_NL", "IQ4_XS", "Q4_0", "Q3_K_M", "Q2_K"]:
        dst = tmp_path / f"{qtype}.gguf"
        quantize(cachet_bin, src, dst, qtype)
        got = Model.load(str(dst))
        got.quantize_activations = False
        err[qtype] = np.abs(got.logits(ids) - a).max() / np.abs(a).max()
    print(err)
    bounds = {"Q8_0": 0.01, "Q6_K": 0.04, "Q5_K_M": 0.06, "Q5_0": 0.08, "Q4_K_M": 0.12, "IQ4_NL": 0.15,
              "IQ4_XS": 0.15, "Q4_0": 0.2, "Q3_K_M": 0.15, "Q2_K": 0.3}
    assert all(err[q] <= bounds[q] for q in bounds), err
    assert err["Q8_0"] < err["Q6_K"] < err["Q5_K_M"] < err["Q4_K_M"] < err["Q3_K_M"] < err["Q2_K"], err
    assert err["Q4_K_M"] < err["Q4_0"], err
    # The non-linear levels fit these bell-shaped weights better than Q4_0's even ones, at the same bits.
    assert err["IQ4_NL"] < err["Q4_0"] and err["IQ4_XS"] < err["Q4_0"], err


def test_perplexity_matches_numpy(cachet_bin, default_model, tmp_path, shared_dir):
    """`cachet perplexity` on the shipped text (2 chunks of 128 tokens) against the same measure computed from
    the numpy reference's logits over the same tokens."""
    import pathlib
    text = pathlib.Path(__file__).resolve().parents[2] / "data" / "kjv_genesis_1-12.txt"
    out = subprocess.run([cachet_bin, "perplexity", "-m", default_model, "-f", str(text), "--ctx", "128",
                          "--chunks", "2", "--kv-type", "f32", "--precise", "--json"], check=True,
                         capture_output=True, text=True).stdout
    ours = json.loads(out)
    ids = subprocess.run([cachet_bin, "tokenize", "-m", default_model, "-f", str(text)], check=True,
                         capture_output=True, text=True).stdout.split()
    ids = [int(i) for i in ids]
    m = Model.load(default_model)
    m.quantize_activations = False
    nll, n = 0.0, 0
    for c in range(2):
        chunk = ids[c * 128:(c + 1) * 128]
        logits = m.logits(chunk)
        for i in range(64, 127):
            row = logits[i]
            mx = row.max()
            nll += np.log(np.exp(row - mx).sum()) + mx - row[chunk[i + 1]]
            n += 1
    assert ours["scored_tokens"] == n
    assert abs(ours["ppl"] - np.exp(nll / n)) <= 1e-3 * np.exp(nll / n), (ours["ppl"], np.exp(nll / n))


def test_perplexity_skip_and_score_last_score_the_stated_tokens(cachet_bin, default_model):
    """--skip S --score-last W with ctx C scores the predictions of tokens S+C-W .. S+C-1 of the text: a chunk of
    C tokens starting at S, its last W predictions (context extension compares contexts on the same tokens)."""
    import pathlib
    text = pathlib.Path(__file__).resolve().parents[2] / "data" / "kjv_genesis_1-12.txt"
    ids = [int(i) for i in subprocess.run([cachet_bin, "tokenize", "-m", default_model, "-f", str(text)], check=True,
                                          capture_output=True, text=True).stdout.split()]
    S, C, W = 100, 96, 40
    out = subprocess.run([cachet_bin, "perplexity", "-m", default_model, "-f", str(text), "--ctx", str(C),
                          "--chunks", "1", "--skip", str(S), "--score-last", str(W), "--kv-type", "f32", "--precise",
                          "--json"], check=True, capture_output=True, text=True).stdout
    ours = json.loads(out)
    m = Model.load(default_model)
    m.quantize_activations = False
    chunk = ids[S:S + C]  # this model adds no BOS (a model that does gets it first in every chunk)
    logits = m.logits(chunk)
    nll = 0.0
    for i in range(C - 1 - W, C - 1):
        row = logits[i]
        mx = row.max()
        nll += np.log(np.exp(row - mx).sum()) + mx - row[chunk[i + 1]]
    assert ours["scored_tokens"] == W
    assert abs(ours["ppl"] - np.exp(nll / W)) <= 1e-3 * np.exp(nll / W), (ours["ppl"], np.exp(nll / W))
    bad = subprocess.run([cachet_bin, "perplexity", "-m", default_model, "-f", str(text), "--ctx", str(C),
                          "--score-last", str(C)], capture_output=True, text=True)
    assert bad.returncode != 0 and "score-last" in bad.stderr
