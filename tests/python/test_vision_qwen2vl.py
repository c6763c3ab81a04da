"""Qwen2-VL's and Qwen2.5-VL's vision encoders (projector types qwen2vl_merger, qwen2.5vl_merger) against
llama.cpp's (libmtmd through llama-cpp-python) on synthetic files: the ViT at the image's own size with 2D RoPE and
no learned positions, LayerNorm and GELU-quick (Qwen2-VL) or RMSNorm and a gated SiLU FFN with window attention in
every other layer (Qwen2.5-VL: windows of 112 px, the last ones in a row or column smaller), and the
2 x 2 merger; the preprocessing (Qwen's smart resize with its 4-row minimum) against Pillow."""
import subprocess

import numpy as np
import pytest
from PIL import Image

from test_vision import assert_embeddings_match, check_prompt_with_image, ours, random_image
from test_vision_qwen3vl import llama_cpp_logits_with_image, smart_resize

# A ViT 64 wide in 4 px patches merged 2 x 2 (8 px per output row), 4 layers: Qwen2.5-VL's layers 0 and 2 in
# windows of 112 px, 1 and 3 over the whole image.
VIT = ["--n-embd", "64", "--n-layer", "4", "--n-head", "4", "--n-ff", "96", "--image-size", "64",
       "--patch-size", "4", "--merge", "2", "--proj-dim", "64"]


def synth_pair(cachet_bin, tmp_path, kind, wtype):
    lm = tmp_path / "lm.gguf"
    mm = tmp_path / f"mmproj-{kind}-{wtype}.gguf"
    # Qwen2-VL's language model: qwen2 under consecutive M-RoPE sections (2/3/3 of 8 pairs).
    subprocess.run([cachet_bin, "synth", "--arch", "qwen2vl", "-o", str(lm), "--n-embd", "64", "--n-head", "4",
                    "--n-head-kv", "2", "--n-ff", "128", "--n-layer", "3"], check=True)
    subprocess.run([cachet_bin, "synth", "--arch", f"mmproj-{kind}", "-o", str(mm), "--type", wtype, *VIT],
                   check=True)
    return lm, mm


# Sizes in whole 8 px blocks, 8 to 4096 rows (kept by both); Qwen2.5-VL's windows are 112 px (14 blocks) a side:
# one window (8 x 12 blocks), windows that tile the grid (28 x 14), cut at both edges (15 x 31), a taller odd
# grid (17 x 10).
@pytest.mark.parametrize("kind", ["qwen2vl", "qwen25vl"])
@pytest.mark.parametrize("wtype", ["F32", "F16"])
@pytest.mark.parametrize("h,w", [(64, 96), (224, 112), (120, 248), (136, 80)])
def test_qwen2vl_embeddings_match_llama_cpp(cachet_bin, tmp_path, kind, wtype, h, w):
    lm, mm = synth_pair(cachet_bin, tmp_path, kind, wtype)
    rgb = random_image(h, w, seed=h + 3 * w)
    Image.fromarray(rgb).save(tmp_path / "img.png")
    emb, _, info = ours(cachet_bin, mm, tmp_path / "img.png", tmp_path)
    assert info["tokens"] == (h // 8) * (w // 8) and info["dim"] == 64 and info["grid"] == [w // 8, h // 8]
    assert_embeddings_match(emb, lm, mm, rgb, f"{kind} {wtype} {h}x{w}")


# A prompt with an image in the middle (8 x 12 rows: the text after it continues 12 positions on), the pairs
# turning with the rows' time, height and width positions in consecutive sections; llama.cpp reads our rows (the
# language model's side alone; the encoders agree above).
@pytest.mark.parametrize("kind", ["qwen2vl", "qwen25vl"])
def test_qwen2vl_prompt_with_an_image_matches_llama_cpp(cachet_bin, tmp_path, kind):
    lm, mm = synth_pair(cachet_bin, tmp_path, kind, "F16")
    rgb = random_image(64, 96, seed=9)
    Image.fromarray(rgb).save(tmp_path / "img.png")
    ids, at = [2, 17, 33, 5, 9, 101, 7, 44, 12, 3], 4
    rows, _, _ = ours(cachet_bin, mm, tmp_path / "img.png", tmp_path)
    ref, n_img = llama_cpp_logits_with_image(lm, mm, rgb, ids, at, 64, rows)
    assert n_img == 96
    check_prompt_with_image(cachet_bin, lm, mm, tmp_path, rgb, ids, at, ref, n_img)


def test_qwen25vl_windows_matter(cachet_bin, tmp_path):
    """Not vacuous: the same projector with every layer over the whole image gives other rows."""
    import shutil
    import gguf
    _, mm = synth_pair(cachet_bin, tmp_path, "qwen25vl", "F32")
    Image.fromarray(random_image(120, 248, seed=5)).save(tmp_path / "img.png")
    windowed, _, _ = ours(cachet_bin, mm, tmp_path / "img.png", tmp_path)
    full = tmp_path / "full.gguf"
    shutil.copy(mm, full)
    r = gguf.GGUFReader(str(full), "r+")
    field = r.fields["clip.vision.n_wa_pattern"]
    field.parts[field.data[0]][...] = 1
    r.data.flush()
    del r
    other, _, _ = ours(cachet_bin, full, tmp_path / "img.png", tmp_path)
    assert np.abs(other - windowed).max() > 0.05 * np.abs(windowed).max()


# Qwen2-VL's processor: smart resize (factor 28 there, 8 here) between 4 and 4096 rows (ours caps the 16384 at
# 4096), Pillow's bicubic, CLIP's mean and std.
@pytest.mark.parametrize("h,w", [(70, 190), (10, 13), (700, 650)])
def test_qwen2vl_preprocessing_is_smart_resize(cachet_bin, tmp_path, h, w):
    _, mm = synth_pair(cachet_bin, tmp_path, "qwen2vl", "F32")
    rgb = random_image(h, w, seed=h * w)
    Image.fromarray(rgb).save(tmp_path / "img.png")
    _, pix, info = ours(cachet_bin, mm, tmp_path / "img.png", tmp_path)
    hb, wb = smart_resize(h, w, min_rows=4)
    assert info["input"] == [wb, hb]
    img = Image.fromarray(rgb)
    resized = img if (wb, hb) == (w, h) else img.resize((wb, hb), Image.BICUBIC)
    mean = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
    std = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)
    x = np.asarray(resized).astype(np.float32) / np.float32(255.0)
    want = (x - mean) * (np.float32(1.0) / std)
    assert np.allclose(pix, want.transpose(2, 0, 1).reshape(-1), rtol=0, atol=1e-6)
