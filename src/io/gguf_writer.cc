#include "io/gguf_writer.h"

#include <cstdio>
#include <cstring>

#include "kernels/quantize.h"

namespace cachet {

namespace {

template <typename T>
void put(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
void put_str(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

}  // namespace

void GgufWriter::put_key(const std::string& key, GgufType t) {
  put_str(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(t));
  ++n_kv_;
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) {
  if (key == "general.alignment") alignment_ = v;
  put_key(key, GgufType::kU32);
  put(kv_bytes_, v);
}
void GgufWriter::set_i32(const std::string& key, int32_t v) { put_key(key, GgufType::kI32); put(kv_bytes_, v); }
void GgufWriter::set_u64(const std::string& key, uint64_t v) { put_key(key, GgufType::kU64); put(kv_bytes_, v); }
void GgufWriter::set_f32(const std::string& key, float v) { put_key(key, GgufType::kF32); put(kv_bytes_, v); }
void GgufWriter::set_bool(const std::string& key, bool v) {
  put_key(key, GgufType::kBool);
  put<uint8_t>(kv_bytes_, v ? 1 : 0);
}
void GgufWriter::set_string(const std::string& key, const std::string& v) {
  put_key(key, GgufType::kString);
  put_str(kv_bytes_, v);
}
void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  put_key(key, GgufType::kArray);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::kString));
  put<uint64_t>(kv_bytes_, v.size());
  for (const auto& s : v) put_str(kv_bytes_, s);
}
void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  put_key(key, GgufType::kArray);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::kI32));
  put<uint64_t>(kv_bytes_, v.size());
  for (int32_t x : v) put(kv_bytes_, x);
}
void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
  put_key(key, GgufType::kArray);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::kF32));
  put<uint64_t>(kv_bytes_, v.size());
  for (float x : v) put(kv_bytes_, x);
}
void GgufWriter::set_bool_array(const std::string& key, const std::vector<bool>& v) {
  put_key(key, GgufType::kArray);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::kBool));
  put<uint64_t>(kv_bytes_, v.size());
  for (bool x : v) put<uint8_t>(kv_bytes_, x ? 1 : 0);
}

namespace {

void put_scalar(std::vector<uint8_t>& out, GgufType t, const GgufValue& v) {
  switch (t) {
    case GgufType::kU8: put<uint8_t>(out, static_cast<uint8_t>(v.i)); break;
    case GgufType::kI8: put<int8_t>(out, static_cast<int8_t>(v.i)); break;
    case GgufType::kU16: put<uint16_t>(out, static_cast<uint16_t>(v.i)); break;
    case GgufType::kI16: put<int16_t>(out, static_cast<int16_t>(v.i)); break;
    case GgufType::kU32: put<uint32_t>(out, static_cast<uint32_t>(v.i)); break;
    case GgufType::kI32: put<int32_t>(out, static_cast<int32_t>(v.i)); break;
    case GgufType::kU64: put<uint64_t>(out, v.u); break;
    case GgufType::kI64: put<int64_t>(out, v.i); break;
    case GgufType::kF32: put<float>(out, static_cast<float>(v.f)); break;
    case GgufType::kF64: put<double>(out, v.f); break;
    case GgufType::kBool: put<uint8_t>(out, v.i ? 1 : 0); break;
    case GgufType::kString: put_str(out, v.str); break;
    case GgufType::kArray: break;
  }
}

void put_value(std::vector<uint8_t>& out, const GgufValue& v) {
  if (v.type != GgufType::kArray) {
    put_scalar(out, v.type, v);
    return;
  }
  put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
  put<uint64_t>(out, v.array_size());
  if (v.elem_type == GgufType::kString) {
    for (size_t i = 0; i < v.count; ++i) put_str(out, std::string(v.str_at(i)));
    return;
  }
  // Numeric arrays are copied as stored (little-endian, the element type's width).
  GgufValue e;
  for (size_t i = 0; i < v.count; ++i) {
    e.i = v.int_at(i);
    e.u = static_cast<uint64_t>(e.i);
    e.f = v.float_at(i);
    put_scalar(out, v.elem_type, e);
  }
}

}  // namespace

void GgufWriter::set_value(const std::string& key, const GgufValue& v) {
  if (key == "general.alignment" && v.type == GgufType::kU32) alignment_ = static_cast<uint32_t>(v.u);
  put_key(key, v.type);
  put_value(kv_bytes_, v);
}

Status GgufWriter::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                              std::vector<uint8_t> data) {
  if (ne.empty() || ne.size() > 4) return invalid_argument("tensor '" + name + "': 1 to 4 dims");
  int64_t rows = 1;
  for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
  auto rb = row_bytes(type, ne[0]);
  if (!rb || *rb * rows != data.size())
    return invalid_argument("tensor '" + name + "': data size does not match shape and type");
  tensors_.push_back({name, type, ne, std::move(data)});
  return Status::ok();
}

Status GgufWriter::add_tensor_f32(const std::string& name, DType type, const std::vector<int64_t>& ne,
                                  const float* values) {
  int64_t rows = 1;
  for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
  auto rb = row_bytes(type, ne.empty() ? 0 : ne[0]);
  if (!rb) return invalid_argument("tensor '" + name + "': row length not a multiple of the block size");
  std::vector<uint8_t> data(*rb * rows);
  for (int64_t r = 0; r < rows; ++r)
    CACHET_RETURN_IF_ERROR(quantize_row(type, values + r * ne[0], data.data() + r * *rb, ne[0]));
  return add_tensor(name, type, ne, std::move(data));
}

std::vector<uint8_t> GgufWriter::serialize_header() const {
  std::vector<uint8_t> out;
  put<uint32_t>(out, 0x46554747);
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, n_kv_);
  out.insert(out.end(), kv_bytes_.begin(), kv_bytes_.end());
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_str(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) put<uint64_t>(out, static_cast<uint64_t>(n));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset = align_up(offset + t.data.size());
  }
  out.resize(align_up(out.size()), 0);
  return out;
}

std::vector<uint8_t> GgufWriter::serialize() const {
  std::vector<uint8_t> out = serialize_header();
  for (const auto& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize(align_up(out.size()), 0);
  }
  return out;
}

Status GgufWriter::write(const std::string& path) const {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return io_error("cannot create '" + path + "'");
  bool ok = true;
  std::vector<uint8_t> header = serialize_header();
  ok &= std::fwrite(header.data(), 1, header.size(), f) == header.size();
  const std::vector<uint8_t> zeros(alignment_, 0);
  for (const auto& t : tensors_) {
    ok &= std::fwrite(t.data.data(), 1, t.data.size(), f) == t.data.size();
    size_t pad = align_up(t.data.size()) - t.data.size();
    ok &= std::fwrite(zeros.data(), 1, pad, f) == pad;
  }
  ok &= std::fclose(f) == 0;
  if (!ok) return io_error("short write to '" + path + "'");
  return Status::ok();
}

}  // namespace cachet
