"""Vision encoders against llama.cpp's own (libmtmd, through llama-cpp-python built with it by
scripts/setup_oracles.sh) on synthetic projector files, the preprocessing against Pillow (the Hugging Face
processors' resize), and hostile images against the command line."""
import ctypes
import json
import subprocess

import numpy as np
import pytest
from PIL import Image

import llama_cpp
from llama_cpp import mtmd_cpp as mtmd

VIT = ["--n-embd", "96", "--n-layer", "3", "--n-head", "3", "--n-ff", "160", "--image-size", "112",
       "--patch-size", "14", "--merge", "2", "--proj-dim", "64"]


def synth_pair(cachet_bin, tmp_path, wtype, lm_extra=()):
    lm = tmp_path / "lm.gguf"
    mm = tmp_path / f"mmproj-{wtype}.gguf"
    subprocess.run([cachet_bin, "synth", "--arch", "gemma3", "-o", str(lm), "--n-embd", "64", "--n-layer", "3",
                    "--n-head", "4", "--n-head-kv", "2", "--n-ff", "128", "--head-dim", "16", *lm_extra], check=True)
    subprocess.run([cachet_bin, "synth", "--arch", "mmproj-gemma3", "-o", str(mm), "--type", wtype] + VIT, check=True)
    return lm, mm


def random_image(h, w, seed):
    rng = np.random.default_rng(seed)
    # Smooth structure plus noise, so resizing has something to get wrong.
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([np.sin(x / 7.0 + c) * np.cos(y / 5.0 - c) for c in range(3)], -1) * 100 + 128
    return np.clip(base + rng.normal(0, 30, (h, w, 3)), 0, 255).astype(np.uint8)


def ours(cachet_bin, mm, img_path, tmp_path, threads=2):
    out = tmp_path / "emb.f32"
    pix = tmp_path / "pix.f32"
    r = subprocess.run([cachet_bin, "encode-image", "--mmproj", str(mm), "--image", str(img_path), "-o", str(out),
                        "--pixels", str(pix), "-t", str(threads)], check=True, capture_output=True, text=True)
    info = json.loads(r.stdout)
    emb = np.fromfile(out, dtype=np.float32).reshape(info["tokens"], info["dim"])
    return emb, np.fromfile(pix, dtype=np.float32), info


def llama_cpp_embeddings(lm, mm, rgb, flash_attn, model=None, dim=64):
    """libmtmd's embeddings of one image: its tokenizer splits the marker out, its encoder runs the image chunk."""
    llama_cpp.llama_backend_init()
    own = model is None
    if own:
        model = llama_cpp.llama_model_load_from_file(str(lm).encode(), llama_cpp.llama_model_default_params())
    assert model
    p = mtmd.mtmd_context_params_default()
    p.use_gpu = False
    p.n_threads = 2
    p.warmup = False
    p.print_timings = False
    p.flash_attn_type = 1 if flash_attn else 0
    ctx = mtmd.mtmd_init_from_file(str(mm).encode(), model, p)
    assert ctx
    h, w, _ = rgb.shape
    data = (ctypes.c_uint8 * rgb.size).from_buffer_copy(np.ascontiguousarray(rgb).tobytes())
    bitmap = mtmd.mtmd_bitmap_init(w, h, data)
    chunks = mtmd.mtmd_input_chunks_init()
    text = mtmd.mtmd_input_text()
    text.text = mtmd.mtmd_default_marker()
    text.text_len = len(text.text)
    text.add_special = False
    text.parse_special = True
    bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
    assert mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(text), bitmaps, 1) == 0
    ref = None
    for i in range(mtmd.mtmd_input_chunks_size(chunks)):
        chunk = mtmd.mtmd_input_chunks_get(chunks, i)
        if mtmd.mtmd_input_chunk_get_type(chunk) == 1:  # image
            n = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
            assert mtmd.mtmd_encode_chunk(ctx, chunk) == 0
            ref = np.ctypeslib.as_array(mtmd.mtmd_get_output_embd(ctx), shape=(n * dim,)).reshape(n, dim).copy()
    mtmd.mtmd_input_chunks_free(chunks)
    mtmd.mtmd_bitmap_free(bitmap)
    mtmd.mtmd_free(ctx)
    if own:
        llama_cpp.llama_model_free(model)
    assert ref is not None, "libmtmd made no image chunk"
    return ref


def assert_embeddings_match(emb, lm, mm, rgb, label, dim=64):
    """Our rows against libmtmd's, flash attention off and on: within 1e-3 of its largest value."""
    for flash in (False, True):
        ref = llama_cpp_embeddings(lm, mm, rgb, flash, dim=dim)
        assert emb.shape == ref.shape
        scale = np.abs(ref).max()
        assert scale > 0.5, "a vacuous fixture"
        err = np.abs(emb - ref).max()
        assert err <= 1e-3 * scale, f"{label} flash={flash}: {err:.3g} of {scale:.3g}"


def check_prompt_with_image(cachet_bin, lm, mm, tmp_path, rgb, ids, at, ref, n_img):
    """`cachet logits` of ids[:at] + the image + ids[at:] against ref (llama.cpp's rows of logits): within 2e-3
    of the largest logit at every position; and not vacuous: the image upside down moves the logits of the text
    after it by far more than that."""
    out = tmp_path / "logits.f32"

    def run(img):
        subprocess.run([cachet_bin, "logits", "-m", str(lm), "--prompt-ids", ",".join(map(str, ids)), "-o",
                        str(out), "--mmproj", str(mm), "--image", str(img), "--image-at", str(at)], check=True)
        return np.fromfile(out, dtype=np.float32).reshape(ref.shape)

    Image.fromarray(rgb).save(tmp_path / "prompt-img.png")
    mine = run(tmp_path / "prompt-img.png")
    scale = np.abs(ref).max()
    err = np.abs(mine - ref).max(axis=1)
    assert err.max() <= 2e-3 * scale, f"rows {np.argsort(-err)[:4]}: {err.max():.3g} of {scale:.3g}"
    Image.fromarray(rgb[::-1].copy()).save(tmp_path / "flipped.png")
    other = run(tmp_path / "flipped.png")
    assert np.abs(other[at + n_img:] - mine[at + n_img:]).max() > 20 * 2e-3 * scale


# Square images: resized without changing shape by both (llama.cpp pads a non-square image to keep its aspect,
# Gemma 3's own processor stretches it; docs/vision.md), smaller, equal to and larger than the encoder's 112.
@pytest.mark.parametrize("wtype", ["F32", "F16"])
@pytest.mark.parametrize("side", [112, 200, 57])
def test_gemma3_embeddings_match_llama_cpp(cachet_bin, tmp_path, wtype, side):
    lm, mm = synth_pair(cachet_bin, tmp_path, wtype)
    rgb = random_image(side, side, seed=side)
    Image.fromarray(rgb).save(tmp_path / "img.png")
    emb, _, info = ours(cachet_bin, mm, tmp_path / "img.png", tmp_path)
    assert info["tokens"] == 16 and info["dim"] == 64
    assert_embeddings_match(emb, lm, mm, rgb, f"{wtype} {side}px")


def llama_cpp_context(model, n_ctx):
    """A llama.cpp context for comparing logits: an f32 KV cache, flash attention off, 2 threads."""
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = n_ctx
    cp.type_k = cp.type_v = 0  # f32
    cp.flash_attn_type = 0
    cp.n_threads = cp.n_threads_batch = 2
    return llama_cpp.llama_init_from_model(model, cp)


def llama_cpp_decode(ctx, n_vocab, rows, n, pos, tokens=None, embd=None):
    """One llama_decode of n tokens (ids) or embedding rows (embd), every position's logits appended to rows. pos:
    n positions, or 4 n (M-RoPE's section-major t, y, x, 0 of an embedding batch)."""
    b = llama_cpp.llama_batch_init(n, 0 if embd is None else embd.shape[1], 1)
    own_pos = ctypes.cast(b.pos, ctypes.c_void_p).value  # the address (a field read aliases the field)
    if len(pos) == 4 * n and n > 0 and embd is not None:
        arr = (ctypes.c_int32 * (4 * n))(*pos)
        b.pos = ctypes.cast(arr, type(b.pos))
    else:
        for i in range(n):
            b.pos[i] = pos[i]
    for i in range(n):
        if tokens is not None:
            b.token[i] = tokens[i]
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = 0
        b.logits[i] = 1
    if embd is not None:
        ctypes.memmove(b.embd, embd.ctypes.data, embd.nbytes)
    b.n_tokens = n
    assert llama_cpp.llama_decode(ctx, b) == 0
    for i in range(n):
        rows.append(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy())
    b.pos = ctypes.cast(own_pos, type(b.pos))
    llama_cpp.llama_batch_free(b)


def llama_cpp_logits_with_image(lm, mm, rgb, ids, at, both_ways=True, emb=None, n_ctx=64):
    """llama.cpp's logits at every position of ids[:at] + the image + ids[at:], fed as mtmd's helper feeds a
    Gemma image: its rows (libmtmd's, or emb) as one batch with causal attention off where the model sees an
    image both ways (mtmd_decode_use_non_causal; Gemma 4's sliding-window layers only), an f32 KV cache."""
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(str(lm).encode(), llama_cpp.llama_model_default_params())
    if emb is None:
        emb = llama_cpp_embeddings(lm, mm, rgb, False, model=model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    ctx = llama_cpp_context(model, n_ctx)
    rows = []
    n = emb.shape[0]
    llama_cpp_decode(ctx, n_vocab, rows, at, range(at), tokens=ids[:at])
    llama_cpp.llama_set_causal_attn(ctx, not both_ways)
    llama_cpp_decode(ctx, n_vocab, rows, n, range(at, at + n), embd=np.ascontiguousarray(emb, dtype=np.float32))
    llama_cpp.llama_set_causal_attn(ctx, True)
    rest = ids[at:]
    llama_cpp_decode(ctx, n_vocab, rows, len(rest), range(at + n, at + n + len(rest)), tokens=rest)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    return np.array(rows), n


# A prompt with an image in the middle: text before it (causal), the image's 16 rows (seeing each other both ways,
# also past a sliding window of 6), text after. No final soft-cap, so the largest logit is a fair yardstick.
@pytest.mark.parametrize("window", [0, 6])
def test_gemma3_prompt_with_an_image_matches_llama_cpp(cachet_bin, tmp_path, window):
    lm, mm = synth_pair(cachet_bin, tmp_path, "F16", ["--sliding-window", str(window)] if window else [])
    rgb = random_image(140, 140, seed=3)
    Image.fromarray(rgb).save(tmp_path / "img.png")
    ids, at = [2, 17, 33, 5, 9, 101, 7, 44, 12, 3], 4
    ref, n_img = llama_cpp_logits_with_image(lm, mm, rgb, ids, at)
    assert n_img == 16
    check_prompt_with_image(cachet_bin, lm, mm, tmp_path, rgb, ids, at, ref, n_img)


def test_embeddings_do_not_depend_on_threads(cachet_bin, tmp_path):
    _, mm = synth_pair(cachet_bin, tmp_path, "F16")
    Image.fromarray(random_image(90, 130, 5)).save(tmp_path / "img.jpg", quality=85)
    one, _, _ = ours(cachet_bin, mm, tmp_path / "img.jpg", tmp_path, threads=1)
    two, _, _ = ours(cachet_bin, mm, tmp_path / "img.jpg", tmp_path, threads=2)
    assert np.array_equal(one, two)


# The preprocessing Gemma 3's Hugging Face processor does: Pillow's bilinear resize to the square (aspect not
# kept), then (x / 255 - 0.5) / 0.5 per channel.
@pytest.mark.parametrize("h,w", [(70, 190), (300, 41), (112, 112), (20, 33)])
def test_preprocessing_is_pillows_resize(cachet_bin, tmp_path, h, w):
    _, mm = synth_pair(cachet_bin, tmp_path, "F32")
    rgb = random_image(h, w, seed=h * w)
    Image.fromarray(rgb).save(tmp_path / "img.png")
    _, pix, _ = ours(cachet_bin, mm, tmp_path / "img.png", tmp_path)
    resized = np.asarray(Image.fromarray(rgb).resize((112, 112), Image.BILINEAR)).astype(np.float32)
    want = ((resized / np.float32(255.0) - np.float32(0.5)) * np.float32(2.0)).transpose(2, 0, 1).reshape(-1)
    assert np.array_equal(pix, want)


def test_hostile_images_are_clear_errors(cachet_bin, tmp_path):
    _, mm = synth_pair(cachet_bin, tmp_path, "F32")
    good = tmp_path / "good.jpg"
    Image.fromarray(random_image(64, 64, 1)).save(good, quality=90)
    data = good.read_bytes()
    png = tmp_path / "good.png"
    Image.fromarray(random_image(64, 64, 1)).save(png)
    huge = bytearray(png.read_bytes())
    huge[16:24] = (200000).to_bytes(4, "big") + (200000).to_bytes(4, "big")
    cases = {
        "empty.png": b"",
        "text.jpg": b"this is not an image at all",
        "truncated.jpg": data[: len(data) // 2],
        "truncated.png": png.read_bytes()[:100],
        "huge.png": bytes(huge),
        "zero.png": bytes(huge[:16]) + b"\0" * 8 + bytes(huge[24:]),
    }
    for name, content in cases.items():
        p = tmp_path / name
        p.write_bytes(content)
        r = subprocess.run([cachet_bin, "encode-image", "--mmproj", str(mm), "--image", str(p)],
                           capture_output=True, text=True)
        assert r.returncode == 1, f"{name}: exit {r.returncode} {r.stderr}"
        assert r.stderr.startswith("error: "), f"{name}: {r.stderr}"
