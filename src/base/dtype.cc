#include "base/dtype.h"

#include <array>
#include <cstring>

#include "base/check.h"
#include "base/checked_math.h"

namespace cachet {

namespace {

struct Entry {
  uint32_t id;
  DTypeTraits t;
};

constexpr Entry kTable[] = {
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},      {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 40}},      {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},  {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},  {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},   {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},    {40, {"NVFP4", 64, 36}},
    {41, {"Q1_0", 128, 18}},
};

}  // namespace

std::optional<DTypeTraits> dtype_traits(uint32_t raw) {
  for (const auto& e : kTable)
    if (e.id == raw) return e.t;
  return std::nullopt;
}

const DTypeTraits& traits(DType t) {
  for (const auto& e : kTable)
    if (e.id == static_cast<uint32_t>(t)) return e.t;
  CACHET_CHECK_MSG(false, "unknown dtype %u", static_cast<unsigned>(t));
  std::abort();
}

std::optional<DType> dtype_from_name(const std::string& name) {
  for (const auto& e : kTable)
    if (strcasecmp(e.t.name, name.c_str()) == 0) return static_cast<DType>(e.id);
  return std::nullopt;
}

std::optional<size_t> row_bytes(DType t, int64_t n) {
  const auto& tr = traits(t);
  if (n < 0 || n % tr.block_size != 0) return std::nullopt;
  return checked_mul(static_cast<uint64_t>(n / tr.block_size), tr.block_bytes);
}

bool dtype_computable(DType t) {
  switch (t) {
    case DType::kF32: case DType::kF16: case DType::kBF16:
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1:
    case DType::kQ2_K: case DType::kQ3_K: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
    case DType::kIQ4_NL: case DType::kIQ4_XS: case DType::kMXFP4:
      return true;
    default:
      return false;
  }
}

const char* dtype_name(DType t) { return traits(t).name; }

}  // namespace cachet
