// Malformed files: each must give a Status naming the problem (never a crash), and `cachet run` must exit
// non-zero with that message. The loader tests also run under ASan/UBSan in CI (scripts/test.sh).
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

// Hand-assembled GGUF bytes, for layouts the writer would never produce.
class Bytes {
 public:
  template <typename T>
  Bytes& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  }
  Bytes& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (uint64_t n : ne) put<uint64_t>(n);
    return put<uint32_t>(type).put<uint64_t>(offset);
  }
  Bytes& pad(size_t align = 32) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
  std::vector<uint8_t> b;
};

struct Case {
  const char* name;
  std::vector<uint8_t> bytes;
  const char* expect;  // a phrase the error must contain
};

std::vector<Case> cases() {
  std::vector<Case> v;
  v.push_back({"empty file", {}, "not a GGUF file"});
  v.push_back({"wrong magic", Bytes().put<uint32_t>(0x46554746).put<uint32_t>(3).zeros(16).b, "magic"});
  v.push_back({"version 1", Bytes().header(0, 0, 1).b, "version 1"});
  v.push_back({"version 4", Bytes().header(0, 0, 4).b, "unsupported GGUF version 4"});
  v.push_back({"big-endian", Bytes().header(0, 0, 0x03000000).b, "big-endian"});
  v.push_back({"n_tensors 2^64-1", Bytes().header(~uint64_t{0}, 0).zeros(64).b, "tensor count"});
  v.push_back({"n_kv 2^64-1", Bytes().header(0, ~uint64_t{0}).zeros(64).b, "metadata count"});
  v.push_back({"truncated header", Bytes().header(0, 0).b, ""});
  v.back().bytes.resize(12);
  v.push_back({"key longer than the file", Bytes().header(0, 1).put<uint64_t>(uint64_t{1} << 40).zeros(8).b,
               "runs past the end"});
  v.push_back({"string value longer than the file",
               Bytes().header(0, 1).str("k").put<uint32_t>(8).put<uint64_t>(1000).zeros(8).b, "runs past the end"});
  v.push_back({"unknown value type", Bytes().header(0, 1).str("k").put<uint32_t>(13).zeros(8).b,
               "unknown value type"});
  v.push_back({"array count past the file",
               Bytes().header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(6).put<uint64_t>(~uint64_t{0} / 2).b,
               "cannot fit"});
  v.push_back({"array of arrays",
               Bytes().header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(1).put<uint32_t>(4)
                   .put<uint64_t>(0).b,
               "arrays of arrays"});
  v.push_back({"bool array holding 7",
               Bytes().header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(7).put<uint64_t>(2).put<uint8_t>(1)
                   .put<uint8_t>(7).b,
               "not 0 or 1"});
  v.push_back({"bool not 0/1", Bytes().header(0, 1).str("k").put<uint32_t>(7).put<uint8_t>(5).zeros(8).b,
               "not 0 or 1"});
  v.push_back({"duplicate key",
               Bytes().header(0, 2).str("k").put<uint32_t>(4).put<uint32_t>(1).str("k").put<uint32_t>(4).put<uint32_t>(2).b,
               "duplicate metadata key"});
  v.push_back({"alignment not a power of two",
               Bytes().header(0, 1).str("general.alignment").put<uint32_t>(4).put<uint32_t>(24).b,
               "not a power of two"});
  v.push_back({"alignment zero", Bytes().header(0, 1).str("general.alignment").put<uint32_t>(4).put<uint32_t>(0).b,
               "not a power of two"});
  v.push_back({"n_dims 5", Bytes().header(1, 0).tensor("t", {1, 1, 1, 1, 1}, 0, 0).pad().zeros(32).b,
               "n_dims 5"});
  v.push_back({"n_dims 0", Bytes().header(1, 0).tensor("t", {}, 0, 0).pad().zeros(32).b, "n_dims 0"});
  v.push_back({"dims product overflows",
               Bytes().header(1, 0).tensor("t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0).pad().zeros(32).b,
               "overflows"});
  v.push_back({"zero dim", Bytes().header(1, 0).tensor("t", {4, 0}, 0, 0).pad().zeros(32).b, "dimension 1 is 0"});
  v.push_back({"unknown tensor type", Bytes().header(1, 0).tensor("t", {4}, 99, 0).pad().zeros(32).b,
               "unknown tensor type 99"});
  v.push_back({"removed tensor type 4", Bytes().header(1, 0).tensor("t", {32}, 4, 0).pad().zeros(32).b,
               "unknown tensor type 4"});
  v.push_back({"row not whole blocks", Bytes().header(1, 0).tensor("t", {20}, 2, 0).pad().zeros(64).b,
               "not a multiple of the Q4_0 block size"});
  v.push_back({"offset past the end", Bytes().header(1, 0).tensor("t", {8}, 0, 64).pad().zeros(32).b,
               "runs past the end"});
  v.push_back({"data truncated", Bytes().header(1, 0).tensor("t", {64}, 0, 0).pad().zeros(100).b,
               "runs past the end"});
  v.push_back({"offset not aligned", Bytes().header(1, 0).tensor("t", {4}, 0, 4).pad().zeros(64).b,
               "not a multiple of the alignment"});
  v.push_back({"overlapping tensors",
               Bytes().header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32).pad().zeros(128).b, "overlap"});
  v.push_back({"duplicate tensor name",
               Bytes().header(2, 0).tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).pad().zeros(64).b,
               "duplicate tensor name"});
  return v;
}

std::string write_temp(const std::string& name, const std::vector<uint8_t>& bytes) {
  std::string path = testing::temp_path(name);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return path;
}

// Runs the CLI; returns (exit status, stderr).
std::pair<int, std::string> run_cli(const std::string& args) {
  std::string cmd = std::string(CACHET_BIN) + " " + args + " 2>&1 >/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  int st = p ? pclose(p) : -1;
  return {st, out};
}

TEST(GgufMalformed, EveryCaseIsAClearError) {
  for (const Case& c : cases()) {
    auto r = GgufFile::parse(c.bytes.data(), c.bytes.size());
    ASSERT_FALSE(r.is_ok()) << c.name << " parsed";
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << c.name << ": message was: " << r.status().message();
  }
}

TEST(GgufMalformed, CliExitsNonZeroWithTheMessage) {
  int i = 0;
  for (const Case& c : cases()) {
    std::string path = write_temp("bad" + std::to_string(i++) + ".gguf", c.bytes);
    auto [st, err] = run_cli("run -m " + path + " --prompt-ids 1 -n 1");
    ASSERT_TRUE(WIFEXITED(st)) << c.name << ": killed by a signal";
    EXPECT_NE(WEXITSTATUS(st), 0) << c.name;
    EXPECT_NE(err.find("error:"), std::string::npos) << c.name << ": " << err;
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
  }
}

std::vector<uint8_t> valid_model_bytes(std::string* path_out) {
  SyntheticSpec s;
  s.n_vocab = 300;
  s.n_layer = 1;
  std::string path = testing::temp_path("valid_small.gguf");
  EXPECT_TRUE(write_synthetic_model(s, path).is_ok());
  std::ifstream in(path, std::ios::binary);
  if (path_out) *path_out = path;
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(GgufMalformed, TruncationAnywhereBeforeTheLastTensorFails) {
  std::vector<uint8_t> full = valid_model_bytes(nullptr);
  auto ok = GgufFile::parse(full.data(), full.size());
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  uint64_t end = 0;
  for (const auto& t : (*ok)->tensors()) end = std::max(end, (*ok)->data_offset() + t.offset + t.n_bytes);
  // Every prefix shorter than the end of the last tensor's data is an error, at any boundary.
  for (size_t n = 0; n < end; n += (n < 4096 ? 1 : 997)) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + n);
    auto r = GgufFile::parse(cut.data(), cut.size());
    ASSERT_FALSE(r.is_ok()) << "truncated to " << n << " bytes parsed";
  }
}

// Rewrites a valid synthetic model with one change, for the model-level checks.
std::string rewrite(const std::string& src, const std::string& name,
                    const std::function<void(const std::string&, GgufValue&)>& edit_kv,
                    const std::string& drop_tensor = "",
                    const std::function<void(GgufTensorInfo&)>& edit_tensor = {}) {
  auto f = GgufFile::open(src);
  EXPECT_TRUE(f.is_ok());
  GgufWriter w;
  for (const auto& k : (*f)->keys()) {
    GgufValue v = *(*f)->find(k);
    if (edit_kv) edit_kv(k, v);
    w.set_value(k, v);
  }
  for (auto t : (*f)->tensors()) {
    if (t.name == drop_tensor) continue;
    std::vector<uint8_t> data(t.data, t.data + t.n_bytes);
    if (edit_tensor) edit_tensor(t);
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    EXPECT_TRUE(w.add_tensor(t.name, t.type, ne, data).is_ok());
  }
  std::string out = testing::temp_path(name);
  EXPECT_TRUE(w.write(out).is_ok());
  return out;
}

TEST(GgufMalformed, HyperParametersAreChecked) {
  std::string good;
  valid_model_bytes(&good);
  ASSERT_TRUE(load_model(good).is_ok());
  auto set_u32 = [](const std::string& key, uint32_t val) {
    return [key, val](const std::string& k, GgufValue& v) {
      if (k == key) v.i = v.u = val;
    };
  };
  struct ModelCase {
    std::string file;
    const char* expect;
  };
  std::vector<ModelCase> mc = {
      {rewrite(good, "kvheads.gguf", set_u32("llama.attention.head_count_kv", 3)), "does not divide n_head"},
      {rewrite(good, "heads.gguf", set_u32("llama.attention.head_count", 3)), "does not divide n_embd"},
      {rewrite(good, "zero_layers.gguf", set_u32("llama.block_count", 0)), "must be positive"},
      {rewrite(good, "more_layers.gguf", set_u32("llama.block_count", 2)), "missing tensor attn_norm of layer 1"},
      // fuzz_gguf's first finding: a block count far above the tensors present looped (and allocated) per layer
      // until memory ran out.
      {rewrite(good, "huge_layers.gguf", set_u32("llama.block_count", 1u << 30)), "but the file has only"},
      {rewrite(good, "ff.gguf", set_u32("llama.feed_forward_length", 100)), "expected [64, 100]"},
      {rewrite(good, "bos.gguf", set_u32("tokenizer.ggml.bos_token_id", 300)), "outside the vocabulary"},
      {rewrite(good, "vocab.gguf", set_u32("llama.vocab_size", 299)), "does not match token_embd"},
      {rewrite(good, "nokey.gguf", {}, "blk.0.attn_k.weight"), "missing tensor attn_k"},
      {rewrite(good, "rope.gguf", set_u32("llama.rope.dimension_count", 17)), "rope_dim 17"},
      {rewrite(good, "arch.gguf",
               [](const std::string& k, GgufValue& v) {
                 if (k == "general.architecture") v.str = "mamba";
               }),
       "architecture 'mamba' is not supported"},
      {rewrite(good, "eps_type.gguf",
               [](const std::string& k, GgufValue& v) {
                 if (k == "llama.embedding_length") {
                   v.type = GgufType::kString;
                   v.str = "64";
                 }
               }),
       "must be an integer"},
  };
  for (const auto& c : mc) {
    auto r = load_model(c.file);
    ASSERT_FALSE(r.is_ok()) << c.file;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << c.file << ": " << r.status().message();
    auto [st, err] = run_cli("run -m " + c.file + " --prompt-ids 1 -n 1");
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 1) << c.file;
    EXPECT_NE(err.find(c.expect), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace cachet
