"""Gemma 4's vision encoder (projector type gemma4v) and its language model's image rows against llama.cpp's
(libmtmd through llama-cpp-python) on synthetic files: RMS-normed ViT layers with q/k norms, 2D rotary halves,
per-axis position tables, clamped linears, 3 x 3 average pooling, standardisation and the projection; a prompt
with an image in it on a Gemma 4 with sliding-window layers (the image's rows both ways there, causal in the
global layers) and on one with per-layer embeddings (causal, the image rows' per-layer inputs from token 0). The
preprocessing (Gemma 4's aspect-preserving resize to its token budget, Pillow's bicubic) against Pillow."""
import math
import subprocess

import numpy as np
import pytest
from PIL import Image

from test_vision import (assert_embeddings_match, check_prompt_with_image, llama_cpp_logits_with_image, ours,
                         random_image)

# A ViT 64 wide in 4 px patches pooled 3 x 3 (12 px per output row), 3 layers.
VIT = ["--n-embd", "64", "--n-layer", "3", "--n-head", "4", "--n-ff", "96", "--image-size", "48",
       "--patch-size", "4", "--merge", "3", "--proj-dim", "64"]

# 26B-A4B-like (sliding-window layers with a window shorter than the prompt, every third layer global), and
# E2B-like (per-layer embeddings, shared KV).
LMS = {
    "swa": ["--n-layer", "3", "--full-attn-interval", "3", "--sliding-window", "8"],
    "per_layer": ["--n-layer", "6", "--full-attn-interval", "3", "--sliding-window", "8", "--per-layer-embd", "32",
                  "--kv-shared", "3"],
}


def synth_pair(cachet_bin, tmp_path, wtype, lm="swa"):
    lm_path = tmp_path / "lm.gguf"
    mm = tmp_path / f"mmproj-{wtype}.gguf"
    subprocess.run([cachet_bin, "synth", "--arch", "gemma4", "-o", str(lm_path), "--n-embd", "64", "--n-head", "4",
                    "--n-head-kv", "2", "--n-ff", "128", "--head-dim", "32", "--global-head-dim", "64",
                    "--global-kv-heads", "1",
                    *LMS[lm]], check=True)
    subprocess.run([cachet_bin, "synth", "--arch", "mmproj-gemma4", "-o", str(mm), "--type", wtype, *VIT],
                   check=True)
    return lm_path, mm


# Sizes that fill the 280-row budget exactly (14 x 20, 20 x 14 and 10 x 28 blocks of 12 px), so the model's
# processor keeps them as they are, and so does llama.cpp (between its 70 and 1120 rows).
@pytest.mark.parametrize("wtype", ["F32", "F16"])
@pytest.mark.parametrize("h,w", [(168, 240), (240, 168), (120, 336)])
def test_gemma4_embeddings_match_llama_cpp(cachet_bin, tmp_path, wtype, h, w):
    lm, mm = synth_pair(cachet_bin, tmp_path, wtype)
    rgb = random_image(h, w, seed=h + 2 * w)
    Image.fromarray(rgb).save(tmp_path / "img.png")
    emb, _, info = ours(cachet_bin, mm, tmp_path / "img.png", tmp_path)
    assert info["tokens"] == 280 and info["dim"] == 64 and info["grid"] == [w // 12, h // 12]
    assert_embeddings_match(emb, lm, mm, rgb, f"{wtype} {h}x{w}")


def test_gemma4_clamps_bind(cachet_bin, tmp_path):
    """The fixture's clamps bind: the same projector with its bounds opened to +-FLT_MAX gives other rows, so the
    agreement above covers them."""
    import shutil
    import gguf
    _, mm = synth_pair(cachet_bin, tmp_path, "F32")
    Image.fromarray(random_image(168, 240, seed=4)).save(tmp_path / "img.png")
    emb, _, _ = ours(cachet_bin, mm, tmp_path / "img.png", tmp_path)
    opened = tmp_path / "opened.gguf"
    shutil.copy(mm, opened)
    r = gguf.GGUFReader(str(opened), "r+")
    n = 0
    for t in r.tensors:
        if t.name.endswith(("_min", "_max")):
            t.data[...] = np.float32(3.4028235e38) * (-1 if t.name.endswith("_min") else 1)
            n += 1
    assert n == 3 * 4 + 2
    r.data.flush()
    del r
    other, _, _ = ours(cachet_bin, opened, tmp_path / "img.png", tmp_path)
    assert np.abs(other - emb).max() > 0.05 * np.abs(emb).max()


# A 14 x 20 grid of rows (168 x 240 px, kept by both) between text, our rows given to llama.cpp too (the language
# model's side alone: its random layers carry the encoders' 4e-4 to about 2e-3 of the largest logit). 26B-like:
# the rows see each other both ways in the local layers (the window of 8 still bounds what lies behind), causally
# in the global one; E2B-like: causally everywhere, their per-layer inputs token 0's (as llama.cpp and the model
# take them) plus the projection of the row, and the last 3 layers on earlier layers' KV.
@pytest.mark.parametrize("lm", ["swa", "per_layer"])
def test_gemma4_prompt_with_an_image_matches_llama_cpp(cachet_bin, tmp_path, lm):
    lm_path, mm = synth_pair(cachet_bin, tmp_path, "F16", lm)
    rgb = random_image(168, 240, seed=11)
    Image.fromarray(rgb).save(tmp_path / "img.png")
    ids, at = [2, 17, 33, 5, 9, 101, 7, 44, 12, 3], 4
    rows, _, _ = ours(cachet_bin, mm, tmp_path / "img.png", tmp_path)
    ref, n_img = llama_cpp_logits_with_image(lm_path, mm, rgb, ids, at, both_ways=(lm == "swa"), emb=rows, n_ctx=320)
    check_prompt_with_image(cachet_bin, lm_path, mm, tmp_path, rgb, ids, at, ref, n_img)


def gemma4_size(h, w, patch=4, merge=3, tokens=280):
    """Gemma 4's image processor's get_aspect_ratio_preserving_size."""
    side = patch * merge
    f = math.sqrt(tokens * merge * merge * patch * patch / (h * w))
    th, tw = int(math.floor(f * h / side)) * side, int(math.floor(f * w / side)) * side
    if th == 0:
        th, tw = side, min(int(math.floor(w / h)) * side, tokens * side)
    elif tw == 0:
        tw, th = side, min(int(math.floor(h / w)) * side, tokens * side)
    return th, tw


# Shrunk, grown, and so thin that one side comes to no block.
@pytest.mark.parametrize("h,w", [(300, 410), (20, 33), (168, 240), (9, 1000), (1000, 5)])
def test_gemma4_preprocessing_is_its_resize_and_pillows_bicubic(cachet_bin, tmp_path, h, w):
    _, mm = synth_pair(cachet_bin, tmp_path, "F32")
    rgb = random_image(h, w, seed=h * w)
    Image.fromarray(rgb).save(tmp_path / "img.png")
    _, pix, info = ours(cachet_bin, mm, tmp_path / "img.png", tmp_path)
    th, tw = gemma4_size(h, w)
    assert info["input"] == [tw, th]
    img = Image.fromarray(rgb)
    resized = img if (tw, th) == (w, h) else img.resize((tw, th), Image.BICUBIC)
    want = np.asarray(resized).astype(np.float32) / np.float32(255.0)
    assert np.array_equal(pix, want.transpose(2, 0, 1).reshape(-1))
