#include <fstream>

#include <gtest/gtest.h>

#include "io/llama2c.h"
#include "model/model.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

TEST(Llama2c, LoadsStories260K) {
  auto m = load_model(testing::shared_dir() + "/models/stories260K.bin");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_ff, 172);
  EXPECT_EQ(c.n_layer, 5);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_EQ(c.n_ctx_train, 512);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ((*m)->gguf(), nullptr);
}

TEST(Llama2c, TruncatedOrCorruptHeaderIsRejected) {
  std::ifstream in(testing::shared_dir() + "/models/stories260K.bin", std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
  auto write = [](const std::string& name, const std::vector<char>& b) {
    std::string p = testing::temp_path(name);
    std::ofstream(p, std::ios::binary).write(b.data(), b.size());
    return p;
  };
  std::vector<char> cut(bytes.begin(), bytes.end() - 4);
  EXPECT_FALSE(load_model(write("cut.bin", cut)).is_ok());
  std::vector<char> bad = bytes;
  int32_t huge = 1 << 30;
  std::memcpy(bad.data(), &huge, 4);  // dim
  EXPECT_FALSE(load_model(write("bad.bin", bad)).is_ok());
  EXPECT_FALSE(looks_like_llama2c(reinterpret_cast<const uint8_t*>(bad.data()), bad.size()));
}

}  // namespace
}  // namespace cachet
