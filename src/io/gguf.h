// GGUF v2/v3 reader. The file is memory-mapped; tensor data is never copied. Every count, length, dim,
// type and offset is checked against the file before use, so a malformed file yields a Status naming the
// problem, never a crash or an allocation larger than the file.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/mmap_file.h"
#include "cachet/status.h"

namespace cachet {

enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9,
  kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* gguf_type_name(GgufType t);
bool gguf_type_is_integer(GgufType t);

struct GgufValue {
  GgufType type = GgufType::kU8;
  // Scalars: integers (and bool) in `i` (u64 values above INT64_MAX are kept in `u`), floats in `f`.
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0.0;
  std::string str;
  // Arrays are not decoded: elements stay in the mapping and are read through the accessors, so the reader
  // never allocates more than the file holds (a string array keeps one pointer per string: 8 bytes, no more
  // than the string's own length field).
  GgufType elem_type = GgufType::kU8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;              // the first element (numeric arrays)
  std::vector<const uint8_t*> str_ptrs;      // each string's length field (string arrays)

  int64_t int_at(size_t i) const;
  double float_at(size_t i) const;
  std::string_view str_at(size_t i) const;
  std::vector<std::string> strings() const;  // a copy of a string array

  bool is_integer() const;
  bool is_float() const { return type == GgufType::kF32 || type == GgufType::kF64; }
  size_t array_size() const;
  std::string to_display(size_t max_items = 8) const;
};

struct GgufTensorInfo {
  std::string name;
  DType type = DType::kF32;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;                     // from the start of the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;           // into the mapping

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;
};

class GgufFile {
 public:
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses a buffer the caller keeps alive (tests, fuzzing).
  static Result<std::unique_ptr<GgufFile>> parse(const uint8_t* data, size_t size);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }
  const std::string& path() const { return path_; }
  // See MappedFile::drop_pages (nothing for a parsed caller buffer).
  void drop_pages(const uint8_t* p, size_t n) const { file_.drop_pages(p, n); }

  const std::vector<std::string>& keys() const { return key_order_; }
  const GgufValue* find(const std::string& key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;

  // Typed getters with errors that name the key. Integers accept any integer type that fits.
  Result<uint64_t> get_uint(const std::string& key) const;
  Result<double> get_float(const std::string& key) const;
  Result<std::string> get_string(const std::string& key) const;
  Result<bool> get_bool(const std::string& key) const;
  // A copy of a string array; nullopt when the key is missing or not a string array.
  std::optional<std::vector<std::string>> get_string_array(const std::string& key) const;

 private:
  Status parse_all();

  MappedFile file_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<std::string> key_order_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace cachet
