// Tokenizer golden tests: every text in a vocab file's .inp encodes to the ids in its .out (no BOS/EOS,
// special tokens not parsed, as llama.cpp's own tests), and decodes back to the text. The files: ../shared/vocab/
// and llama.cpp's own models/ directory inside the llama-cpp-python sdist (scripts/setup_oracles.sh unpacks it into
// ~/.cache/cachet/llama.cpp/src-VERSION, or CACHET_LLAMACPP_SRC; used from there, never committed).
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "io/gguf.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

// The families of the architectures cachet runs, from llama.cpp's models/: Llama 3.x (llama-bpe), Qwen2.5 and
// Qwen3 (qwen2), Qwen3.5 / 3.6 (qwen35), and more BPE pre-tokenizers users meet.
#define LLAMACPP_VOCABS "llamacpp:ggml-vocab-llama-bpe.gguf", "llamacpp:ggml-vocab-qwen2.gguf", \
    "llamacpp:ggml-vocab-command-r.gguf", "llamacpp:ggml-vocab-deepseek-llm.gguf", \
    "llamacpp:ggml-vocab-deepseek-coder.gguf", "llamacpp:ggml-vocab-falcon.gguf", "llamacpp:ggml-vocab-mpt.gguf", \
    "llamacpp:ggml-vocab-refact.gguf", "llamacpp:ggml-vocab-bert-bge.gguf", "llamacpp:ggml-vocab-gemma-4.gguf", \
    "llamacpp:ggml-vocab-qwen35.gguf"

namespace cachet {
namespace {

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    size_t hit = s.find(sep, pos);
    if (hit == std::string::npos) {
      out.push_back(s.substr(pos));
      return out;
    }
    out.push_back(s.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
}

std::unique_ptr<Tokenizer> load(const std::string& path) {
  auto f = GgufFile::open(path);
  EXPECT_TRUE(f.is_ok()) << f.status().message();
  auto t = Tokenizer::from_gguf(**f);
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return std::move(t).value();
}

std::string llamacpp_models_dir() {
  if (const char* e = std::getenv("CACHET_LLAMACPP_SRC")) return std::string(e) + "/vendor/llama.cpp/models";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/cachet/llama.cpp/src-0.3.36/vendor/llama.cpp/models";
}

// "shared:NAME" or "llamacpp:NAME".
std::string vocab_path(const std::string& param) {
  const size_t colon = param.find(':');
  const std::string where = param.substr(0, colon), name = param.substr(colon + 1);
  return (where == "shared" ? testing::shared_dir() + "/vocab" : llamacpp_models_dir()) + "/" + name;
}

class VocabFiles : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabFiles, EncodeMatchesTheTestVectorsAndDecodesBack) {
  const std::string base = vocab_path(GetParam());
  ASSERT_TRUE(std::filesystem::exists(base)) << base << " is missing (bash scripts/setup_oracles.sh fetches it)";
  auto tok = load(base);
  ASSERT_TRUE(tok);
  // Each text ends with the separator (gemma-4's file omits it after the last one).
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::string inp = read_file(base + ".inp");
  if (inp.size() < sep.size() || inp.compare(inp.size() - sep.size(), sep.size(), sep) != 0) inp += sep;
  auto texts = split(inp, sep);
  auto lines = split(read_file(base + ".out"), "\n");
  ASSERT_EQ(texts.size(), lines.size());
  int checked = 0;
  for (size_t i = 0; i + 1 < texts.size(); ++i) {
    std::vector<int32_t> want;
    std::istringstream is(lines[i]);
    for (int32_t id; is >> id;) want.push_back(id);
    auto got = tok->encode(texts[i], /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(got, want) << GetParam() << " text " << i << ": '" << texts[i] << "'";
    // WordPiece normalizes (case, accents, spacing around punctuation): it does not decode back.
    if (tok->kind() != Tokenizer::Kind::kWpm) EXPECT_EQ(tok->decode(got), texts[i]) << GetParam() << " text " << i;
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

INSTANTIATE_TEST_SUITE_P(Files, VocabFiles,
                         ::testing::Values("shared:ggml-vocab-gpt-2.gguf", "shared:ggml-vocab-llama-spm.gguf",
                                           "shared:ggml-vocab-phi-3.gguf", "shared:ggml-vocab-starcoder.gguf",
                                           LLAMACPP_VOCABS),
                         [](const auto& info) {
                           const std::string file = info.param.substr(info.param.find(':') + 1);
                           std::string n = info.param.substr(0, info.param.find(':')) + "_" +
                                           file.substr(11, file.size() - 16);
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// WordPiece (llama.cpp's bert-bge vocabulary, BGE's uncased BERT): [CLS] text [SEP] with add_special, the
// normalizer's lowercasing and accent stripping, punctuation and CJK split out, unknown words whole.
TEST(Tokenizer, WordPieceSpecialTokensAndNormalization) {
  const std::string path = vocab_path("llamacpp:ggml-vocab-bert-bge.gguf");
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing (bash scripts/setup_oracles.sh fetches it)";
  auto tok = load(path);
  ASSERT_TRUE(tok);
  ASSERT_EQ(tok->kind(), Tokenizer::Kind::kWpm);
  const auto plain = tok->encode("Hello world", false, false);
  auto with = tok->encode("Hello world", true, false);
  ASSERT_EQ(with.size(), plain.size() + 2);
  EXPECT_EQ(tok->token_text(with.front()), "[CLS]");
  EXPECT_EQ(tok->token_text(with.back()), "[SEP]");
  EXPECT_EQ(std::vector<int32_t>(with.begin() + 1, with.end() - 1), plain);
  EXPECT_EQ(tok->encode("HELLO WORLD", false, false), plain);           // lowercased
  EXPECT_EQ(tok->encode("  hello\t\n world  ", false, false), plain);  // whitespace only separates
  EXPECT_EQ(tok->encode("h\u00e9llo", false, false), tok->encode("hello", false, false));  // accent stripped
  EXPECT_EQ(tok->decode(plain), "hello world");
  // "a,b": three words; a CJK ideograph is a word of its own.
  EXPECT_EQ(tok->encode("a,b", false, false).size(), 3u);
  EXPECT_EQ(tok->encode("\u4e2d\u6587", false, false).size(), 2u);
  // A word with no full segmentation is one [UNK], not a partial match.
  const auto unk = tok->encode("\u2603", false, false);
  ASSERT_EQ(unk.size(), 1u);
  EXPECT_EQ(tok->token_text(unk[0]), "[UNK]");
  // [SEP] in text is a token only when special tokens are parsed.
  EXPECT_EQ(tok->encode("[SEP]", false, true), std::vector<int32_t>{*tok->sep()});
  EXPECT_GT(tok->encode("[SEP]", false, false).size(), 1u);
}

TEST(Tokenizer, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(sanitize_utf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(sanitize_utf8("\xC3"), "\xEF\xBF\xBD");                  // truncated sequence
  EXPECT_EQ(sanitize_utf8("\xE0\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: one per byte
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(sanitize_utf8("h\xC3\xA9llo \xF0\x9F\xA6\x99"), "h\xC3\xA9llo \xF0\x9F\xA6\x99");
  auto tok = load(testing::shared_dir() + "/vocab/ggml-vocab-gpt-2.gguf");
  EXPECT_EQ(tok->encode("a\xFF" "b", false, false), tok->encode("a\xEF\xBF\xBD" "b", false, false));
}

TEST(Tokenizer, StreamingNeverSplitsACharacter) {
  auto tok = load(testing::shared_dir() + "/vocab/ggml-vocab-gpt-2.gguf");
  const std::string text = "llama 🦙 and 日本語 text";
  auto ids = tok->encode(text, false, false);
  StreamDecoder dec(*tok);
  std::string out;
  for (int32_t id : ids) {
    std::string chunk = dec.push(id);
    EXPECT_EQ(sanitize_utf8(chunk), chunk) << "a streamed chunk is not whole UTF-8";
    out += chunk;
  }
  out += dec.flush();
  EXPECT_EQ(out, text);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F\xA6\x99"), 6u);
}

TEST(Tokenizer, SpecialTokensOnlyWhenAsked) {
  auto tok = load(testing::shared_dir() + "/vocab/ggml-vocab-llama-spm.gguf");
  auto plain = tok->encode("<s>hi", false, false);
  auto parsed = tok->encode("<s>hi", false, true);
  ASSERT_FALSE(parsed.empty());
  EXPECT_EQ(parsed.front(), *tok->bos());
  EXPECT_NE(plain.front(), *tok->bos());
  auto with_bos = tok->encode("hi", true, false);
  EXPECT_EQ(with_bos.front(), *tok->bos());
}

}  // namespace
}  // namespace cachet

#include "io/gguf_writer.h"

namespace cachet {
namespace {

// A byte-level vocabulary (the 256 byte symbols plus a few merges) under every supported pre-tokenizer:
// each must compile, round-trip text, and an unknown name must be an error.
std::string byte_level_vocab(const std::string& pre) {
  std::vector<std::string> tokens;
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    uint32_t cp = printable ? b : 256 + extra++;
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    tokens.push_back(s);
  }
  tokens.push_back("he");
  tokens.push_back("ll");
  tokens.push_back("hell");
  tokens.push_back("\xC4\xA0w");  // "Ġw"
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre);
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_string_array("tokenizer.ggml.merges", {"h e", "l l", "he ll", "\xC4\xA0 w"});
  std::string path = testing::temp_path("bpe_" + pre + ".gguf");
  EXPECT_TRUE(w.write(path).is_ok());
  return path;
}

TEST(Tokenizer, EveryPreTokenizerFamilyWorks) {
  const std::string text = "hello world 12345 don't  \n\n Ünïcödé 日本語 テスト 한국어 ！？ — done";
  for (const char* pre : {"gpt-2", "default", "mpt", "olmo", "gpt-neox", "starcoder", "smollm", "refact", "command-r",
                          "llama3", "llama-bpe", "qwen2", "deepseek-coder", "deepseek-llm", "falcon", "lfm2",
                          "gpt-4o", "qwen35", "tekken", "deepseek-v3", "deepseek-r1-qwen", "falcon3", "pixtral", "dbrx",
                          "llama4", "exaone4", "minerva-7b", "kimi-k2", "glm4", "chatglm-bpe"}) {
    auto tok = load(byte_level_vocab(pre));
    ASSERT_TRUE(tok) << pre;
    auto ids = tok->encode(text, false, false);
    EXPECT_EQ(tok->decode(ids), text) << pre;
    auto hello = tok->encode("hello", false, false);
    ASSERT_FALSE(hello.empty());
    EXPECT_EQ(tok->token_text(hello[0]), "hell") << pre << ": merges applied in rank order";
  }
  // LFM2's files name their own pre-type; llama.cpp splits them by llama3's rules, and so do we.
  auto lfm2 = load(byte_level_vocab("lfm2"));
  auto llama3 = load(byte_level_vocab("llama3"));
  ASSERT_TRUE(lfm2 && llama3);
  EXPECT_EQ(lfm2->encode(text, false, false), llama3->encode(text, false, false));
  auto f = GgufFile::open(byte_level_vocab("no-such-pre"));
  ASSERT_TRUE(f.is_ok());
  auto t = Tokenizer::from_gguf(**f);
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("pre-tokenizer 'no-such-pre'"), std::string::npos) << t.status().message();
}

// Harmony vocabularies (gpt-oss): <|return|> and <|call|> end a turn, <|end|> (one message of it) does not, as
// llama.cpp decides; elsewhere <|end|> (Phi-3's) still ends generation.
TEST(Tokenizer, HarmonyTurnsEndAtReturnAndCallNotAtEnd) {
  auto vocab = [](bool harmony) {
    std::vector<std::string> tokens = {"<unk>", "<s>", "a", "b", "<|end|>"};
    std::vector<int32_t> types = {2, 3, 1, 1, 3};
    if (harmony) {
      tokens.insert(tokens.end(), {"<|return|>", "<|call|>", "<|start|>"});
      types.insert(types.end(), {3, 3, 3});
    }
    GgufWriter w;
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    const std::string path = testing::temp_path(harmony ? "harmony_vocab.gguf" : "phi_vocab.gguf");
    EXPECT_TRUE(w.write(path).is_ok());
    return load(path);
  };
  auto h = vocab(true), p = vocab(false);
  ASSERT_TRUE(h && p);
  EXPECT_TRUE(h->is_end_of_generation(5));   // <|return|>
  EXPECT_TRUE(h->is_end_of_generation(6));   // <|call|>
  EXPECT_FALSE(h->is_end_of_generation(4));  // <|end|>
  EXPECT_FALSE(h->is_end_of_generation(7));  // <|start|>
  EXPECT_TRUE(p->is_end_of_generation(4));
}

}  // namespace
}  // namespace cachet
