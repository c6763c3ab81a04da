"""The default model's tokenizer against HF `tokenizers` built from the same vocabulary and merges, and a
WordPiece (BERT) vocabulary against HF's BERT normalizer, pre-tokenizer and WordPiece model, on thousands of
varied strings; and the encoder's work (linear in the input)."""
import json
import random
import shutil
import subprocess
import tempfile

import pytest

# Pieces the generated strings are made of: prose, code, emoji (incl. ZWJ sequences and flags), CJK,
# combining marks, scripts with and without spaces, digits, runs of whitespace and newlines.
POOL = [
    "Hello", " world", "The quick brown fox", " jumps over the lazy dog.", "don't", " I'm", " they'll", " it's",
    "def f(x):\n    return x**2\n", "for (int i = 0; i < n; ++i) {", "}\n", "#include <stdio.h>", "x += 1;",
    "    ", "\t", "\n", "\n\n", "\r\n", "  \n  ", " ", "   ", "\u00a0", "\u3000",
    "🦙", "😀😃", "👩\u200d💻", "🇫🇷", "👍🏽", "✨", "日本語のテキスト", "中文字符", "한국어", "Ελληνικά", "русский текст",
    "עברית", "العربية", "हिन्दी", "ไทย", "e\u0301", "n\u0303", "Z\u0351\u0359", "café", "naïve", "Äpfel",
    "12345", "3.14159", "1,000,000", " 42", "0x1F", "2024-05-01", "v1.2.3", "١٢٣", "½", "²",
    "https://example.com/a?b=c", "user@example.com", "<|im_start|>", "<s>", "[INST]", "$$x^2$$", "->", "!!!", "...",
    "'s", "'re", "'ve", "'ll", "'d", "'m", "'t", "O'Neil", "rock'n'roll",
]


def make_strings(n, seed=1234):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 8)
        out.append("".join(rng.choice(POOL) for _ in range(k)))
    out += ["", " ", "  ", "\n", "a" * 300, " ".join(["word"] * 50), "1" * 40, "🦙" * 20]
    return out


def smollm2_hf_tokenizer(default_model):
    """HF `tokenizers` built from the GGUF's vocabulary and merges, configured as SmolLM2's tokenizer.json."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    r = GGUFReader(default_model)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    assert r.fields["tokenizer.ggml.pre"].contents() == "smollm"
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges]))
    # SmolLM2's tokenizer.json: single digits, then GPT-2 byte-level with its regex, no prefix space.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    return tok


@pytest.fixture(scope="module")
def hf_tokenizer(default_model):
    return smollm2_hf_tokenizer(default_model)


def ours_batch(cachet_bin, model, strings, tmp_path):
    p = tmp_path / "lines.jsonl"
    p.write_text("\n".join(json.dumps(s) for s in strings) + "\n", encoding="utf-8")
    out = subprocess.run([cachet_bin, "tokenize", "-m", str(model), "--no-add-special", "--lines-json", str(p)],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_default_tokenizer_matches_hf_tokenizers(cachet_bin, default_model, hf_tokenizer, tmp_path):
    strings = make_strings(2500)
    ours = ours_batch(cachet_bin, default_model, strings, tmp_path)
    assert len(ours) == len(strings)
    mismatches = [(s, o, hf_tokenizer.encode(s, add_special_tokens=False).ids)
                  for s, o in zip(strings, ours) if o != hf_tokenizer.encode(s, add_special_tokens=False).ids]
    assert not mismatches, f"{len(mismatches)} of {len(strings)} differ; first: {mismatches[0]!r}"


def bert_hf_tokenizer(path):
    """HF `tokenizers` configured as an uncased BERT tokenizer.json, from a GGUF WordPiece vocabulary (llama.cpp
    writes word starts as U+2581 + piece and continuations bare; HF's WordPiece wants bare starts and "##")."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    r = GGUFReader(str(path))
    assert r.fields["tokenizer.ggml.model"].contents() == "bert"
    vocab = {}
    for i, t in enumerate(r.fields["tokenizer.ggml.tokens"].contents()):
        key = t[1:] if t.startswith("\u2581") else (t if t.startswith("[") and t.endswith("]") else "##" + t)
        vocab.setdefault(key, i)
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=10**9))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=True,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


def test_wordpiece_matches_hf_bert_tokenizer(cachet_bin, llamacpp_models, tmp_path):
    path = llamacpp_models / "ggml-vocab-bert-bge.gguf"
    hf = bert_hf_tokenizer(path)
    strings = make_strings(2500, seed=99) + ["Ünïcödé ÀÉÎÕÜ", "x\u0000y\ufffdz", "a\u00adb", "\u3000full\uff01width"]
    ours = ours_batch(cachet_bin, path, strings, tmp_path)
    assert len(ours) == len(strings)
    mismatches = [(s, o, hf.encode(s, add_special_tokens=False).ids)
                  for s, o in zip(strings, ours) if o != hf.encode(s, add_special_tokens=False).ids]
    assert not mismatches, f"{len(mismatches)} of {len(strings)} differ; first: {mismatches[0]!r}"


def test_invalid_utf8_becomes_replacement_characters(cachet_bin, default_model, tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"abc\xff\xfe def \xc3")
    good = tmp_path / "good.txt"
    good.write_bytes("abc\ufffd\ufffd def \ufffd".encode())
    run = lambda f: subprocess.run([cachet_bin, "tokenize", "-m", str(default_model), "--no-add-special", "-f", str(f)],
                                   check=True, capture_output=True, text=True).stdout
    assert run(bad) == run(good)


def english_text(n_bytes, seed=7):
    rng = random.Random(seed)
    words = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an "
             "they you were her she there been one all we their has would when if so no will more can about some "
             "time people said could into them other than then its two may only new over after years first way "
             "engine token cache memory model batch prefill decode attention kernel matrix vector thread block "
             "user server request stream latency throughput quantize weight layer head rotary position").split()
    parts, size = [], 0
    while size < n_bytes:
        sent = " ".join(rng.choice(words) for _ in range(rng.randint(5, 18)))
        sent = sent.capitalize() + rng.choice([".", ".", ",", "?", "!", ";"]) + rng.choice([" ", " ", "\n", "\n\n"])
        if rng.random() < 0.05:
            sent += f"{rng.randint(0, 99999)} "
        parts.append(sent)
        size += len(sent)
    return "".join(parts)[:n_bytes]


def encode_instructions(cachet_bin, model, path):
    """Instructions the whole `cachet tokenize` of `path` executes, counted by valgrind (callgrind): the same count
    however busy the machine is, so the test compares work, not seconds (bench/tokenizer_speed.py times it)."""
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={d}/out", cachet_bin, "tokenize",
                            "-m", str(model), "--no-add-special", "-f", str(path)],
                           check=True, capture_output=True, text=True)
    line = next(l for l in r.stderr.splitlines() if "Collected :" in l)
    return int(line.split("Collected :")[1].split()[0])


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind counts the instructions")
def test_encode_work_is_linear_in_the_input(cachet_bin, default_model, tmp_path):
    """Encoding is linear, not quadratic, in the text's length, with and without spaces (a text without spaces
    is one pre-token: the BPE merge loop must not rescan it per merge). Work is counted as instructions over an
    empty input's (loading the model and vocabulary): 4x the text must cost under 5x the work (quadratic: 16x)."""
    files = {}
    for name, text in {"empty": "", "q": english_text(64 << 10), "four_q": english_text(256 << 10, seed=8),
                       "ns": "".join(random.Random(3).choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8_000)),
                       "four_ns": "".join(random.Random(4).choice("abcdefghijklmnopqrstuvwxyz")
                                          for _ in range(32_000))}.items():
        files[name] = tmp_path / f"{name}.txt"
        files[name].write_text(text)
    base = encode_instructions(cachet_bin, default_model, files["empty"])
    work = {k: encode_instructions(cachet_bin, default_model, f) - base for k, f in files.items() if k != "empty"}
    print(f"\ninstructions over loading: {work}")
    assert 0 < work["q"] and 0 < work["ns"], work
    assert work["four_q"] < 5 * work["q"], work
    assert work["four_ns"] < 5 * work["ns"], work


# o200k's pre-tokenizer (gpt-oss's tokenizer.json: a Split on this pattern, then byte-level without its regex).
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def test_gpt_4o_pre_tokenizer_matches_hf_tokenizers(cachet_bin, llamacpp_models, tmp_path):
    """tokenizer.ggml.pre "gpt-4o" (gpt-oss's files): GPT-2's vocabulary and merges (llama.cpp's vocab file) under
    o200k's pre-tokenizer, against HF `tokenizers` configured as gpt-oss's tokenizer.json (no o200k vocabulary is
    reachable here; the split is what the pre-type decides)."""
    import gguf
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    src = gguf.GGUFReader(str(llamacpp_models / "ggml-vocab-gpt-2.gguf"))
    tokens = src.fields["tokenizer.ggml.tokens"].contents()
    merges = src.fields["tokenizer.ggml.merges"].contents()
    path = tmp_path / "gpt-4o-vocab.gguf"
    w = gguf.GGUFWriter(str(path), "gpt-oss")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(src.fields["tokenizer.ggml.token_type"].contents())
    w.add_token_merges(merges)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    hf = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[tuple(m.split(" ", 1)) for m in merges]))
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(O200K), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    strings = make_strings(2500, seed=4) + ["HTTPServer's camelCaseWord IPhone", "ABCdef GHI's x/y\n/z", "12345678"]
    ours = ours_batch(cachet_bin, path, strings, tmp_path)
    assert len(ours) == len(strings)
    mismatches = [(s, o, hf.encode(s, add_special_tokens=False).ids)
                  for s, o in zip(strings, ours) if o != hf.encode(s, add_special_tokens=False).ids]
    assert not mismatches, f"{len(mismatches)} of {len(strings)} differ; first: {mismatches[0]!r}"


# The models' own split patterns (their tokenizer.json / tokenization_kimi.py), for HF `tokenizers` (Oniguruma
# has class intersection) where llama.cpp approximates them.
ORIGINAL_SPLITS = {
    "tekken": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
              r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "kimi-k2": r"[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"
               r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"
               r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+",
}


@pytest.mark.parametrize("pre", ["deepseek-v3", "kimi-k2", "glm4", "chatglm-bpe", "tekken", "qwen35"])
def test_pre_tokenizers_of_2026_families_match_llama_cpp(cachet_bin, llamacpp_models, tmp_path, pre):
    """The pre-types DeepSeek-V3 / R1, Kimi K2, GLM-4.x / 4.7-Flash, Mistral's tekken and Qwen3.5 files name, on
    GPT-2's vocabulary and merges (no file of theirs is reachable here; the split is what the pre-type decides),
    against llama.cpp's own tokenizer (llama-cpp-python, vocab only) on the same file: its regexes and Kimi K2's
    hand-written splitter, and whether a word that is a token is taken whole. Tekken and Kimi K2 put combining
    marks (category M) inside words; llama.cpp's approximations of their patterns split a decomposed "ñ'm" before
    the mark: there the oracle is HF `tokenizers` with the model's own pattern (docs/tokenizer.md)."""
    import gguf
    import llama_cpp

    src = gguf.GGUFReader(str(llamacpp_models / "ggml-vocab-gpt-2.gguf"))
    path = tmp_path / f"{pre}-vocab.gguf"
    w = gguf.GGUFWriter(str(path), "gpt2")
    for key in ("gpt2.block_count", "gpt2.context_length", "gpt2.embedding_length", "gpt2.feed_forward_length",
                "gpt2.attention.head_count"):
        w.add_uint32(key, int(src.fields[key].contents()))
    w.add_float32("gpt2.attention.layer_norm_epsilon", float(src.fields["gpt2.attention.layer_norm_epsilon"].contents()))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(src.fields["tokenizer.ggml.tokens"].contents())
    w.add_token_types(src.fields["tokenizer.ggml.token_type"].contents())
    w.add_token_merges(src.fields["tokenizer.ggml.merges"].contents())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    strings = make_strings(1500, seed=11) + [
        "中文汉字mixed with English words 和日本語のかな 한국어 123456789", "HTTPServer's CamelCase I'M DON'T we'Ll",
        "价格是12345元，约合$1,234.56。", "Émile Zola's «J'accuse» — naïve café", "漢字and漢字", "x=1;y=22;z=333;w=4444"]
    ours = ours_batch(cachet_bin, path, strings, tmp_path)
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    theirs = [llm.tokenize(s.encode("utf-8"), add_bos=False, special=False) for s in strings]
    if pre in ORIGINAL_SPLITS:
        import unicodedata
        from tokenizers import Regex, Tokenizer, models, pre_tokenizers

        tokens = src.fields["tokenizer.ggml.tokens"].contents()
        merges = src.fields["tokenizer.ggml.merges"].contents()
        hf = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                                  merges=[tuple(m.split(" ", 1)) for m in merges], ignore_merges=False))
        hf.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(ORIGINAL_SPLITS[pre]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        marked = [any(unicodedata.category(c).startswith("M") for c in s) for s in strings]
        bad = [(s, o, hf.encode(s, add_special_tokens=False).ids) for s, o, m in zip(strings, ours, marked)
               if m and o != hf.encode(s, add_special_tokens=False).ids]
        assert not bad, f"{pre}: {len(bad)} strings with marks differ from the model's pattern; first: {bad[0]!r}"
        assert sum(marked) >= 10
        theirs = [t if not m else o for o, t, m in zip(ours, theirs, marked)]
    mismatches = [(s, o, t) for s, o, t in zip(strings, ours, theirs) if o != t]
    assert not mismatches, f"{pre}: {len(mismatches)} of {len(strings)} differ; first: {mismatches[0]!r}"
