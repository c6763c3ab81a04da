#include <cstring>

#include <gtest/gtest.h>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

TEST(Gguf, WriterReaderRoundTrip) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("general.alignment", 64);
  w.set_u32("a.u32", 7);
  w.set_i32("a.i32", -3);
  w.set_u64("a.u64", uint64_t{1} << 40);
  w.set_f32("a.f32", 0.5f);
  w.set_bool("a.bool", true);
  w.set_string_array("a.strs", {"x", "", "zz"});
  w.set_i32_array("a.ints", {1, -2, 3});
  w.set_f32_array("a.floats", {1.5f, -2.5f});
  std::vector<float> v(32 * 3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) / 7.0f;
  ASSERT_TRUE(w.add_tensor_f32("t.f32", DType::kF32, {32, 3}, v.data()).is_ok());
  ASSERT_TRUE(w.add_tensor_f32("t.q8", DType::kQ8_0, {32, 3}, v.data()).is_ok());
  ASSERT_TRUE(w.add_tensor_f32("t.f16", DType::kF16, {96}, v.data()).is_ok());
  std::string path = testing::temp_path("roundtrip.gguf");
  ASSERT_TRUE(w.write(path).is_ok());

  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const GgufFile& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(*f.get_string("general.architecture"), "llama");
  EXPECT_EQ(*f.get_uint("a.u32"), 7u);
  EXPECT_EQ(f.find("a.i32")->i, -3);
  EXPECT_FALSE(f.get_uint("a.i32").is_ok());  // negative
  EXPECT_EQ(*f.get_uint("a.u64"), uint64_t{1} << 40);
  EXPECT_EQ(*f.get_float("a.f32"), 0.5);
  EXPECT_TRUE(*f.get_bool("a.bool"));
  EXPECT_EQ(*f.get_string_array("a.strs"), (std::vector<std::string>{"x", "", "zz"}));
  const GgufValue* ints = f.find("a.ints");
  ASSERT_EQ(ints->count, 3u);
  EXPECT_EQ(ints->int_at(0), 1);
  EXPECT_EQ(ints->int_at(1), -2);
  EXPECT_EQ(ints->int_at(2), 3);
  const GgufValue* floats = f.find("a.floats");
  ASSERT_EQ(floats->count, 2u);
  EXPECT_EQ(floats->float_at(0), 1.5);
  EXPECT_EQ(floats->float_at(1), -2.5);
  EXPECT_EQ(f.find("a.strs")->str_at(2), "zz");
  EXPECT_FALSE(f.get_string("missing").is_ok());
  EXPECT_NE(f.get_string("a.u32").status().message().find("must be a string"), std::string::npos);

  ASSERT_EQ(f.tensors().size(), 3u);
  const GgufTensorInfo* t = f.find_tensor("t.f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ne[0], 32);
  EXPECT_EQ(t->ne[1], 3);
  EXPECT_EQ(t->n_bytes, 32u * 3 * 4);
  EXPECT_EQ(std::memcmp(t->data, v.data(), t->n_bytes), 0);
  EXPECT_EQ(f.find_tensor("t.q8")->n_bytes, 3u * 34);
  EXPECT_EQ(f.find_tensor("t.f16")->n_dims, 1);
  for (const auto& ti : f.tensors()) EXPECT_EQ(ti.offset % 64, 0u) << ti.name;

  // Copying every value through set_value reproduces the metadata bytes.
  GgufWriter copy;
  for (const auto& k : f.keys()) copy.set_value(k, *f.find(k));
  std::vector<uint8_t> bytes = copy.serialize();
  auto g = GgufFile::parse(bytes.data(), bytes.size());
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_EQ((*g)->keys(), f.keys());
  EXPECT_EQ((*g)->find("a.strs")->strings(), f.find("a.strs")->strings());
  EXPECT_EQ((*g)->find("a.ints")->int_at(1), -2);
}

}  // namespace
}  // namespace cachet
