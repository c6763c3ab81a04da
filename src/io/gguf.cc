#include "io/gguf.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <sstream>

#include "base/checked_math.h"

namespace cachet {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxDims = 4;

size_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    case GgufType::kString: return 8;       // the length field
    case GgufType::kArray: return 4 + 8;    // element type + count
  }
  return 1;
}

bool known_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

// A bounds-checked cursor over the file.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return n_ - pos_; }

  template <typename T>
  Status read(T* out, const char* what) {
    if (remaining() < sizeof(T))
      return out_of_range(std::string("file truncated while reading ") + what + " at byte " + std::to_string(pos_));
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  const uint8_t* here() const { return p_ + pos_; }
  Status skip(uint64_t n, const char* what) {
    if (n > remaining())
      return out_of_range(std::string("file truncated while reading ") + what + " at byte " + std::to_string(pos_));
    pos_ += n;
    return Status::ok();
  }
  // Reads a string's length and checks that its bytes are in the file; they start at here().
  Status string_length(uint64_t* len, const char* what) {
    CACHET_RETURN_IF_ERROR(read(len, what));
    if (*len > remaining())
      return out_of_range(std::string(what) + ": string length " + std::to_string(*len) + " at byte " +
                          std::to_string(pos_ - 8) + " runs past the end of the file (" +
                          std::to_string(remaining()) + " bytes left)");
    return Status::ok();
  }
  Status skip_string(const char* what) {
    uint64_t len;
    CACHET_RETURN_IF_ERROR(string_length(&len, what));
    pos_ += len;
    return Status::ok();
  }

  Status read_string(std::string* out, const char* what) {
    uint64_t len;
    CACHET_RETURN_IF_ERROR(string_length(&len, what));
    out->assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return Status::ok();
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

Status read_scalar(Reader& r, GgufType t, GgufValue* v, const std::string& key) {
  v->type = t;
  switch (t) {
    case GgufType::kU8: { uint8_t x; CACHET_RETURN_IF_ERROR(r.read(&x, key.c_str())); v->i = x; v->u = x; return Status::ok(); }
    case GgufType::kI8: { int8_t x; CACHET_RETURN_IF_ERROR(r.read(&x, key.c_str())); v->i = x; return Status::ok(); }
    case GgufType::kU16: { uint16_t x; CACHET_RETURN_IF_ERROR(r.read(&x, key.c_str())); v->i = x; v->u = x; return Status::ok(); }
    case GgufType::kI16: { int16_t x; CACHET_RETURN_IF_ERROR(r.read(&x, key.c_str())); v->i = x; return Status::ok(); }
    case GgufType::kU32: { uint32_t x; CACHET_RETURN_IF_ERROR(r.read(&x, key.c_str())); v->i = x; v->u = x; return Status::ok(); }
    case GgufType::kI32: { int32_t x; CACHET_RETURN_IF_ERROR(r.read(&x, key.c_str())); v->i = x; return Status::ok(); }
    case GgufType::kU64: { uint64_t x; CACHET_RETURN_IF_ERROR(r.read(&x, key.c_str())); v->u = x; v->i = static_cast<int64_t>(x); return Status::ok(); }
    case GgufType::kI64: { int64_t x; CACHET_RETURN_IF_ERROR(r.read(&x, key.c_str())); v->i = x; return Status::ok(); }
    case GgufType::kF32: { float x; CACHET_RETURN_IF_ERROR(r.read(&x, key.c_str())); v->f = x; return Status::ok(); }
    case GgufType::kF64: { double x; CACHET_RETURN_IF_ERROR(r.read(&x, key.c_str())); v->f = x; return Status::ok(); }
    case GgufType::kBool: {
      uint8_t x;
      CACHET_RETURN_IF_ERROR(r.read(&x, key.c_str()));
      if (x > 1) return invalid_argument("key '" + key + "': bool value " + std::to_string(x) + " is not 0 or 1");
      v->i = x;
      return Status::ok();
    }
    case GgufType::kString: return r.read_string(&v->str, key.c_str());
    case GgufType::kArray: break;
  }
  return invalid_argument("key '" + key + "': not a scalar type");
}

Status read_value(Reader& r, GgufType t, GgufValue* v, const std::string& key) {
  if (t != GgufType::kArray) return read_scalar(r, t, v, key);
  v->type = GgufType::kArray;
  uint32_t et;
  uint64_t count;
  CACHET_RETURN_IF_ERROR(r.read(&et, key.c_str()));
  if (!known_type(et)) return invalid_argument("key '" + key + "': unknown array element type " + std::to_string(et));
  CACHET_RETURN_IF_ERROR(r.read(&count, key.c_str()));
  v->elem_type = static_cast<GgufType>(et);
  auto need = checked_mul(count, min_value_bytes(v->elem_type));
  if (!need || *need > r.remaining())
    return out_of_range("key '" + key + "': array of " + std::to_string(count) + " " +
                        gguf_type_name(v->elem_type) + " cannot fit in the " + std::to_string(r.remaining()) +
                        " bytes left in the file");
  v->count = count;
  if (v->elem_type == GgufType::kArray) return unimplemented("key '" + key + "': arrays of arrays are not supported");
  if (v->elem_type == GgufType::kString) {
    v->str_ptrs.reserve(count);  // count * 8 <= the bytes left (checked above)
    for (uint64_t k = 0; k < count; ++k) {
      v->str_ptrs.push_back(r.here());
      CACHET_RETURN_IF_ERROR(r.skip_string(key.c_str()));
    }
  } else {
    v->raw = r.here();
    CACHET_RETURN_IF_ERROR(r.skip(count * min_value_bytes(v->elem_type), key.c_str()));
    if (v->elem_type == GgufType::kBool)
      for (uint64_t k = 0; k < count; ++k)
        if (v->raw[k] > 1) return invalid_argument("key '" + key + "': bool value " + std::to_string(v->raw[k]) + " is not 0 or 1");
  }
  return Status::ok();
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* kNames[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64",
                                 "i64", "f64"};
  auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "?";
}

bool GgufValue::is_integer() const { return gguf_type_is_integer(type); }

bool gguf_type_is_integer(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kU16: case GgufType::kI16: case GgufType::kU32:
    case GgufType::kI32: case GgufType::kU64: case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

size_t GgufValue::array_size() const { return type == GgufType::kArray ? count : 0; }

int64_t GgufValue::int_at(size_t i) const {
  const uint8_t* p = raw + i * min_value_bytes(elem_type);
  switch (elem_type) {
    case GgufType::kU8: case GgufType::kBool: return *p;
    case GgufType::kI8: return static_cast<int8_t>(*p);
    case GgufType::kU16: { uint16_t x; std::memcpy(&x, p, 2); return x; }
    case GgufType::kI16: { int16_t x; std::memcpy(&x, p, 2); return x; }
    case GgufType::kU32: { uint32_t x; std::memcpy(&x, p, 4); return x; }
    case GgufType::kI32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case GgufType::kU64: case GgufType::kI64: { int64_t x; std::memcpy(&x, p, 8); return x; }
    case GgufType::kF32: case GgufType::kF64: return static_cast<int64_t>(float_at(i));
    default: return 0;
  }
}

double GgufValue::float_at(size_t i) const {
  const uint8_t* p = raw + i * min_value_bytes(elem_type);
  if (elem_type == GgufType::kF32) { float x; std::memcpy(&x, p, 4); return x; }
  if (elem_type == GgufType::kF64) { double x; std::memcpy(&x, p, 8); return x; }
  return static_cast<double>(int_at(i));
}

std::string_view GgufValue::str_at(size_t i) const {
  uint64_t len;
  std::memcpy(&len, str_ptrs[i], 8);
  return {reinterpret_cast<const char*>(str_ptrs[i] + 8), static_cast<size_t>(len)};
}

std::vector<std::string> GgufValue::strings() const {
  std::vector<std::string> out;
  out.reserve(str_ptrs.size());
  for (size_t i = 0; i < str_ptrs.size(); ++i) out.emplace_back(str_at(i));
  return out;
}

std::string GgufValue::to_display(size_t max_items) const {
  std::ostringstream os;
  switch (type) {
    case GgufType::kString: {
      std::string s = str.size() > 60 ? str.substr(0, 57) + "..." : str;
      for (char& c : s)
        if (c == '\n') c = ' ';
      os << '"' << s << '"';
      break;
    }
    case GgufType::kBool: os << (i ? "true" : "false"); break;
    case GgufType::kF32: case GgufType::kF64: os << f; break;
    case GgufType::kU64: os << u; break;
    case GgufType::kArray: {
      os << gguf_type_name(elem_type) << "[" << array_size() << "]";
      break;
    }
    default: os << i;
  }
  return os.str();
}

std::string GgufTensorInfo::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "]";
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  auto mf = MappedFile::open(path);
  if (!mf.is_ok()) return mf.status();
  auto g = std::unique_ptr<GgufFile>(new GgufFile());
  g->file_ = std::move(mf).value();
  g->base_ = g->file_.data();
  g->size_ = g->file_.size();
  g->path_ = path;
  CACHET_RETURN_IF_ERROR(g->parse_all().with_context(path));
  return g;
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size) {
  auto g = std::unique_ptr<GgufFile>(new GgufFile());
  g->base_ = data;
  g->size_ = size;
  g->path_ = "<memory>";
  CACHET_RETURN_IF_ERROR(g->parse_all());
  return g;
}

Status GgufFile::parse_all() {
  Reader r(base_, size_);
  uint32_t magic;
  if (size_ < 4) return invalid_argument("not a GGUF file: only " + std::to_string(size_) + " bytes");
  CACHET_RETURN_IF_ERROR(r.read(&magic, "magic"));
  if (magic != kMagic) {
    char m[5] = {0};
    std::memcpy(m, &magic, 4);
    for (char& c : m)
      if (c && (c < 32 || c > 126)) c = '?';
    return invalid_argument(std::string("not a GGUF file: magic is '") + m + "', expected 'GGUF'");
  }
  CACHET_RETURN_IF_ERROR(r.read(&version_, "version"));
  if (version_ == 1) return unimplemented("GGUF version 1 is not supported (re-convert the model to v3)");
  if (version_ != 2 && version_ != 3) {
    if (version_ == 0x02000000u || version_ == 0x03000000u)
      return unimplemented("big-endian GGUF files are not supported");
    return invalid_argument("unsupported GGUF version " + std::to_string(version_) + " (expected 2 or 3)");
  }
  uint64_t n_tensors, n_kv;
  CACHET_RETURN_IF_ERROR(r.read(&n_tensors, "tensor count"));
  CACHET_RETURN_IF_ERROR(r.read(&n_kv, "metadata count"));
  // Each key/value needs >= 13 bytes (key length, type, 1-byte value); each tensor info >= 32.
  if (n_kv > r.remaining() / 13)
    return out_of_range("metadata count " + std::to_string(n_kv) + " cannot fit in a " + std::to_string(size_) +
                        "-byte file");
  if (n_tensors > r.remaining() / 32)
    return out_of_range("tensor count " + std::to_string(n_tensors) + " cannot fit in a " + std::to_string(size_) +
                        "-byte file");

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    CACHET_RETURN_IF_ERROR(r.read_string(&key, "metadata key"));
    uint32_t t;
    CACHET_RETURN_IF_ERROR(r.read(&t, "metadata type"));
    if (!known_type(t)) return invalid_argument("key '" + key + "': unknown value type " + std::to_string(t));
    GgufValue v;
    CACHET_RETURN_IF_ERROR(read_value(r, static_cast<GgufType>(t), &v, key));
    if (kv_.count(key)) return invalid_argument("duplicate metadata key '" + key + "'");
    key_order_.push_back(key);
    kv_.emplace(key, std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::kU32)
      return invalid_argument(std::string("general.alignment must be u32, found ") + gguf_type_name(a->type));
    uint64_t al = a->u;
    if (al == 0 || (al & (al - 1)) != 0)
      return invalid_argument("general.alignment " + std::to_string(al) + " is not a power of two");
    alignment_ = al;
  }

  tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo ti;
    CACHET_RETURN_IF_ERROR(r.read_string(&ti.name, "tensor name"));
    const std::string ctx = "tensor '" + ti.name + "'";
    uint32_t n_dims;
    CACHET_RETURN_IF_ERROR(r.read(&n_dims, "tensor dims"));
    if (n_dims == 0 || n_dims > kMaxDims)
      return invalid_argument(ctx + ": n_dims " + std::to_string(n_dims) + " is outside 1..4");
    ti.n_dims = static_cast<int>(n_dims);
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne;
      CACHET_RETURN_IF_ERROR(r.read(&ne, "tensor dim"));
      if (ne == 0 || ne > static_cast<uint64_t>(INT64_MAX))
        return invalid_argument(ctx + ": dimension " + std::to_string(d) + " is " + std::to_string(ne));
      auto p = checked_mul(n_el, ne);
      if (!p || *p > static_cast<uint64_t>(INT64_MAX))
        return out_of_range(ctx + ": the product of its dimensions overflows");
      n_el = *p;
      ti.ne[d] = static_cast<int64_t>(ne);
    }
    uint32_t type;
    CACHET_RETURN_IF_ERROR(r.read(&type, "tensor type"));
    auto tr = dtype_traits(type);
    if (!tr) return invalid_argument(ctx + ": unknown tensor type " + std::to_string(type));
    ti.type = static_cast<DType>(type);
    if (ti.ne[0] % tr->block_size != 0)
      return invalid_argument(ctx + ": row length " + std::to_string(ti.ne[0]) + " is not a multiple of the " +
                              tr->name + " block size " + std::to_string(tr->block_size));
    auto bytes = checked_mul(n_el / tr->block_size, tr->block_bytes);
    if (!bytes) return out_of_range(ctx + ": its size in bytes overflows");
    ti.n_bytes = *bytes;
    CACHET_RETURN_IF_ERROR(r.read(&ti.offset, "tensor offset"));
    if (ti.offset % alignment_ != 0)
      return invalid_argument(ctx + ": offset " + std::to_string(ti.offset) + " is not a multiple of the alignment " +
                              std::to_string(alignment_));
    if (tensor_index_.count(ti.name)) return invalid_argument("duplicate tensor name '" + ti.name + "'");
    tensor_index_[ti.name] = tensors_.size();
    tensors_.push_back(std::move(ti));
  }

  auto data_start = checked_add(r.pos(), alignment_ - 1);
  if (!data_start) return out_of_range("data section offset overflows");
  data_offset_ = *data_start / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > size_)
    return out_of_range("file truncated: the data section would start at byte " + std::to_string(data_offset_) +
                        " of a " + std::to_string(size_) + "-byte file");
  const uint64_t data_size = size_ >= data_offset_ ? size_ - data_offset_ : 0;

  for (auto& ti : tensors_) {
    auto end = checked_add(ti.offset, ti.n_bytes);
    if (!end || *end > data_size)
      return out_of_range("tensor '" + ti.name + "' (" + std::to_string(ti.n_bytes) + " bytes at data offset " +
                          std::to_string(ti.offset) + ") runs past the end of the file (data section is " +
                          std::to_string(data_size) + " bytes)");
    ti.data = base_ + data_offset_ + ti.offset;
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (auto& ti : tensors_) by_offset.push_back(&ti);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const auto* a = by_offset[k - 1];
    const auto* b = by_offset[k];
    if (a->offset + a->n_bytes > b->offset)
      return invalid_argument("tensors '" + a->name + "' and '" + b->name + "' overlap in the file");
  }
  return Status::ok();
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<uint64_t> GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found("missing metadata key '" + key + "'");
  if (!v->is_integer()) return invalid_argument("metadata key '" + key + "' must be an integer, found " +
                                                gguf_type_name(v->type));
  if (v->type == GgufType::kU64) return v->u;
  if (v->i < 0) return invalid_argument("metadata key '" + key + "' is negative (" + std::to_string(v->i) + ")");
  return static_cast<uint64_t>(v->i);
}

Result<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found("missing metadata key '" + key + "'");
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(v->i);
  return invalid_argument("metadata key '" + key + "' must be a number, found " + gguf_type_name(v->type));
}

Result<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found("missing metadata key '" + key + "'");
  if (v->type != GgufType::kString)
    return invalid_argument("metadata key '" + key + "' must be a string, found " + gguf_type_name(v->type));
  return v->str;
}

Result<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found("missing metadata key '" + key + "'");
  if (v->type != GgufType::kBool)
    return invalid_argument("metadata key '" + key + "' must be a bool, found " + gguf_type_name(v->type));
  return v->i != 0;
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v || v->type != GgufType::kArray || v->elem_type != GgufType::kString) return std::nullopt;
  return v->strings();
}

}  // namespace cachet
