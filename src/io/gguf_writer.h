// GGUF v3 writer: metadata in insertion order, tensors aligned to general.alignment (32 unless set).
// Used by test fixtures and `cachet synth` now, and by conversion and quantization later.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "cachet/status.h"
#include "io/gguf.h"

namespace cachet {

class GgufWriter {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_bool_array(const std::string& key, const std::vector<bool>& v);
  // Any value as read by GgufFile (copying metadata between files).
  void set_value(const std::string& key, const GgufValue& v);

  // Raw bytes already in `type`'s layout; ne[0] innermost.
  Status add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne, std::vector<uint8_t> data);
  // Converts f32 values to `type` (quantizing if needed).
  Status add_tensor_f32(const std::string& name, DType type, const std::vector<int64_t>& ne, const float* values);

  Status write(const std::string& path) const;
  std::vector<uint8_t> serialize() const;

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  void put_key(const std::string& key, GgufType t);
  std::vector<uint8_t> serialize_header() const;
  uint64_t align_up(uint64_t x) const { return (x + alignment_ - 1) / alignment_ * alignment_; }
  uint32_t alignment_ = 32;
  std::vector<uint8_t> kv_bytes_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace cachet
