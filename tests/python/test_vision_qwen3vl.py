"""Qwen3-VL's vision encoder (projector type qwen3vl_merger, Qwen3.5's too) and its language model's image
positions against llama.cpp's (libmtmd through llama-cpp-python) on synthetic files: the ViT at the image's own
size with 2D RoPE and interpolated position embeddings, the 2 x 2 merger, deepstack rows, and a prompt with an
image in it placed by M-RoPE (text after the image continuing at max(grid) positions past its start). The
preprocessing (Qwen's smart resize, Pillow's bicubic) against Pillow."""
import subprocess

import numpy as np
import pytest
from PIL import Image

import llama_cpp
from test_vision import llama_cpp_context, llama_cpp_decode, llama_cpp_embeddings, ours, random_image

# A ViT 64 wide in 4 px patches merged 2 x 2 (8 px per output row), 4 layers (3 of them deepstack), position
# embeddings learned for 64 px (16 x 16 patches).
VIT = ["--n-embd", "64", "--n-layer", "4", "--n-head", "4", "--n-ff", "96", "--image-size", "64",
       "--patch-size", "4", "--merge", "2", "--proj-dim", "64"]
ROW = 64 * 4  # the language model's width, and again for each of 3 deepstack rows


# Qwen3-VL's language model (3 deepstack layers), or Qwen3.5's (hybrid: gated delta nets between attention
# layers; its projector has no deepstack rows).
LMS = {
    "qwen3vl": ["--arch", "qwen3vl", "--n-layer", "3", "--head-dim", "16"],
    "qwen35": ["--arch", "qwen35", "--n-layer", "4", "--head-dim", "32", "--ssm-head-dim", "16"],
}


def synth_pair(cachet_bin, tmp_path, wtype, lm_arch="qwen3vl"):
    lm = tmp_path / "lm.gguf"
    mm = tmp_path / f"mmproj-{wtype}.gguf"
    subprocess.run([cachet_bin, "synth", "-o", str(lm), "--n-embd", "64", "--n-head", "4", "--n-head-kv", "2",
                    "--n-ff", "128", *LMS[lm_arch]], check=True)
    subprocess.run([cachet_bin, "synth", "--arch", "mmproj-qwen3vl", "-o", str(mm), "--type", wtype, *VIT,
                    "--deepstack", "3" if lm_arch == "qwen3vl" else "0"], check=True)
    return lm, mm


# Sizes in whole 8 px blocks and between 64 and 4096 rows, so neither engine resizes (llama.cpp's lower bound is
# 8 rows, the model's processor's and ours 64): square at the learned grid, wider, and taller with an odd grid.
@pytest.mark.parametrize("wtype", ["F32", "F16"])
@pytest.mark.parametrize("h,w", [(64, 64), (64, 96), (136, 80)])
def test_qwen3vl_embeddings_match_llama_cpp(cachet_bin, tmp_path, wtype, h, w):
    lm, mm = synth_pair(cachet_bin, tmp_path, wtype)
    rgb = random_image(h, w, seed=h + w)
    Image.fromarray(rgb).save(tmp_path / "img.png")
    emb, _, info = ours(cachet_bin, mm, tmp_path / "img.png", tmp_path)
    assert info["tokens"] == (h // 8) * (w // 8) and info["dim"] == ROW and info["grid"] == [w // 8, h // 8]
    for flash in (False, True):
        ref = llama_cpp_embeddings(lm, mm, rgb, flash, dim=ROW)
        assert emb.shape == ref.shape
        # Each part (the merger's rows, each deepstack layer's) on its own scale.
        for k in range(4):
            part, want = emb[:, 64 * k:64 * (k + 1)], ref[:, 64 * k:64 * (k + 1)]
            scale = np.abs(want).max()
            assert scale > 0.5, "a vacuous fixture"
            err = np.abs(part - want).max()
            assert err <= 1e-3 * scale, f"{wtype} {h}x{w} flash={flash} part {k}: {err:.3g} of {scale:.3g}"


def llama_cpp_logits_with_image(lm, mm, rgb, ids, at, row, emb=None):
    """llama.cpp's logits at every position of ids[:at] + the image + ids[at:], fed as mtmd's helper feeds a
    Qwen-VL image: its rows (libmtmd's, or emb) as one batch at M-RoPE positions (time = the image's start, height
    and width shifted by the row and column in the grid), causal; the text after it from start + max(grid)."""
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(str(lm).encode(), llama_cpp.llama_model_default_params())
    if emb is None:
        emb = llama_cpp_embeddings(lm, mm, rgb, False, model=model, dim=row)
    gy, gx = rgb.shape[0] // 8, rgb.shape[1] // 8
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    ctx = llama_cpp_context(model, 256)
    rows = []
    llama_cpp_decode(ctx, n_vocab, rows, at, range(at), tokens=ids[:at])
    n = emb.shape[0]
    pos4 = [at] * n + [at + i // gx for i in range(n)] + [at + i % gx for i in range(n)] + [0] * n
    llama_cpp_decode(ctx, n_vocab, rows, n, pos4, embd=np.ascontiguousarray(emb, dtype=np.float32))
    rest, p0 = ids[at:], at + max(gx, gy)
    llama_cpp_decode(ctx, n_vocab, rows, len(rest), range(p0, p0 + len(rest)), tokens=rest)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    return np.array(rows), n


# A prompt with an image in the middle (an 8 x 12 grid: the text after it continues 12 positions on, not 96), and
# Qwen3-VL's deepstack rows added after the first three layers; Qwen3.5's recurrent layers read the rows in order.
# Qwen3.5's random gated delta nets amplify the encoders' difference (7e-4 of the largest value, within the
# embeddings' tolerance above) about tenfold, so there llama.cpp reads our rows: the language model's side alone.
@pytest.mark.parametrize("lm_arch", ["qwen3vl", "qwen35"])
def test_qwen_vl_prompt_with_an_image_matches_llama_cpp(cachet_bin, tmp_path, lm_arch):
    lm, mm = synth_pair(cachet_bin, tmp_path, "F16", lm_arch)
    rgb = random_image(64, 96, seed=7)
    Image.fromarray(rgb).save(tmp_path / "img.png")
    ids, at = [2, 17, 33, 5, 9, 101, 7, 44, 12, 3], 4
    out = tmp_path / "logits.f32"

    def run(img):
        subprocess.run([cachet_bin, "logits", "-m", str(lm), "--prompt-ids", ",".join(map(str, ids)), "-o",
                        str(out), "--mmproj", str(mm), "--image", str(img), "--image-at", str(at)], check=True)
        return np.fromfile(out, dtype=np.float32)

    rows = None
    if lm_arch == "qwen35":
        rows, _, _ = ours(cachet_bin, mm, tmp_path / "img.png", tmp_path)
    ref, n_img = llama_cpp_logits_with_image(lm, mm, rgb, ids, at, ROW if lm_arch == "qwen3vl" else 64, rows)
    assert n_img == 96
    mine = run(tmp_path / "img.png").reshape(ref.shape)
    scale = np.abs(ref).max()
    err = np.abs(mine - ref).max(axis=1)
    assert err.max() <= 2e-3 * scale, f"rows {np.argsort(-err)[:4]}: {err.max():.3g} of {scale:.3g}"
    # Not vacuous: another picture moves the logits of the text after it far more than the tolerance.
    Image.fromarray(rgb[::-1].copy()).save(tmp_path / "flipped.png")
    other = run(tmp_path / "flipped.png").reshape(ref.shape)
    assert np.abs(other[at + n_img:] - mine[at + n_img:]).max() > 20 * 2e-3 * scale


def smart_resize(h, w, factor=8, min_rows=64, max_rows=4096):
    """Qwen2-VL's image processor's smart_resize (Python's round: halves to even), bounds in rows."""
    lo, hi = min_rows * factor * factor, max_rows * factor * factor
    hb, wb = max(factor, round(h / factor) * factor), max(factor, round(w / factor) * factor)
    if hb * wb > hi:
        beta = np.sqrt(h * w / hi)
        hb, wb = max(factor, int(np.floor(h / beta / factor)) * factor), max(factor, int(np.floor(w / beta / factor)) * factor)
    elif hb * wb < lo:
        beta = np.sqrt(lo / (h * w))
        hb, wb = int(np.ceil(h * beta / factor)) * factor, int(np.ceil(w * beta / factor)) * factor
    return hb, wb


# Shrunk, stretched to whole blocks, grown to the minimum, and a side of 20 (2.5 blocks: Python's round goes to 2).
@pytest.mark.parametrize("h,w", [(70, 190), (300, 41), (20, 33), (700, 650), (20, 300)])
def test_qwen3vl_preprocessing_is_smart_resize_and_pillows_bicubic(cachet_bin, tmp_path, h, w):
    _, mm = synth_pair(cachet_bin, tmp_path, "F32")
    rgb = random_image(h, w, seed=h * w)
    Image.fromarray(rgb).save(tmp_path / "img.png")
    _, pix, info = ours(cachet_bin, mm, tmp_path / "img.png", tmp_path)
    hb, wb = smart_resize(h, w)
    assert info["input"] == [wb, hb]
    img = Image.fromarray(rgb)
    resized = img if (wb, hb) == (w, h) else img.resize((wb, hb), Image.BICUBIC)
    want = ((np.asarray(resized).astype(np.float32) / np.float32(255.0) - np.float32(0.5)) * np.float32(2.0))
    assert np.array_equal(pix, want.transpose(2, 0, 1).reshape(-1))


def test_qwen3vl_rejects_a_degenerate_aspect(cachet_bin, tmp_path):
    _, mm = synth_pair(cachet_bin, tmp_path, "F32")
    Image.fromarray(random_image(2, 500, 1)).save(tmp_path / "thin.png")
    r = subprocess.run([cachet_bin, "encode-image", "--mmproj", str(mm), "--image", str(tmp_path / "thin.png")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "aspect ratio" in r.stderr, r.stderr
