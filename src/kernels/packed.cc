#include "kernels/packed.h"

#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"

namespace cachet {

bool packed_is_float(DType t) { return t == DType::kF16 || t == DType::kBF16; }

bool packable(DType t) {
  switch (t) {
    case DType::kF16: case DType::kBF16:
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1:
    case DType::kQ2_K: case DType::kQ3_K: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
    case DType::kIQ4_NL: case DType::kIQ4_XS: case DType::kMXFP4:
      return true;
    default:
      return false;
  }
}

size_t packed_group_bytes(DType t, int64_t k, FloatPack fp) {
  if (packed_is_float(t)) {
    return fp == FloatPack::kBf16Pairs ? static_cast<size_t>((k + 1) / 2) * kPackRows * 4
                                       : static_cast<size_t>(k) * kPackRows * 2;
  }
  CACHET_CHECK_MSG(packable(t), "type %s is not packable", dtype_name(t));
  const PackedLayout l = packed_layout(t);
  CACHET_CHECK(k % (32 * l.blocks) == 0);
  return static_cast<size_t>(k / (32 * l.blocks)) * l.super_bytes();
}

uint16_t mxfp4_packed_scale(uint8_t e) {
  return f32_to_fp16(mxfp4_scale(e > 143 ? uint8_t{143} : e));
}

uint8_t* packed_scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes + 63) buf.resize(bytes + 63);
  const auto a = (reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63};
  return buf.data() + (a - reinterpret_cast<uintptr_t>(buf.data()));
}

namespace {

// One row's super-block (or 32-block) decoded to unsigned quants and integer scales.
struct Unpacked {
  uint16_t d = 0, m = 0;  // f16: d and m (the *_1 minimum) or D and Dmin (K types)
  uint8_t q[kQKK] = {};
  int sc[16] = {};        // Q4_K/Q5_K: per 32-block; Q6_K, Q3_K, Q2_K: per 16 elements
  int mn[16] = {};
};

// A 32-block of IQ4 codes (element e < 16 the low nibble of qs[e], e >= 16 the high one of qs[e - 16]), one code
// per element.
void iq4_codes(const uint8_t* qs, uint8_t* q) {
  for (int e = 0; e < 16; ++e) {
    q[e] = qs[e] & 0x0f;
    q[e + 16] = qs[e] >> 4;
  }
}

void unpack(DType t, const uint8_t* row, int64_t sb, Unpacked* u) {
  switch (t) {
    case DType::kQ8_0: {
      const auto& b = reinterpret_cast<const BlockQ8_0*>(row)[sb];
      u->d = b.d;
      for (int e = 0; e < 32; ++e) u->q[e] = static_cast<uint8_t>(b.qs[e] + 128);
      return;
    }
    case DType::kIQ4_NL: {
      const auto& b = reinterpret_cast<const BlockQ4_0*>(row)[sb];
      u->d = b.d;
      iq4_codes(b.qs, u->q);
      return;
    }
    case DType::kMXFP4: {
      const auto& b = reinterpret_cast<const BlockMXFP4*>(row)[sb];
      u->d = mxfp4_packed_scale(b.e);
      iq4_codes(b.qs, u->q);
      return;
    }
    case DType::kIQ4_XS: {
      // As IQ4_NL, per 32-element sub-block j of super-block sb / 8: the scale d * (ls_j - 32) rounded to f16
      // (packed_as).
      const auto& b = reinterpret_cast<const BlockIQ4_XS*>(row)[sb / 8];
      const int j = static_cast<int>(sb % 8);
      u->d = f32_to_fp16(fp16_to_f32(b.d) * static_cast<float>(iq4xs_scale(b, j)));
      iq4_codes(b.qs + 16 * j, u->q);
      return;
    }
    case DType::kQ4_0:
    case DType::kQ4_1: {
      const uint8_t* qs;
      if (t == DType::kQ4_0) {
        const auto& b = reinterpret_cast<const BlockQ4_0*>(row)[sb];
        u->d = b.d;
        qs = b.qs;
      } else {
        const auto& b = reinterpret_cast<const BlockQ4_1*>(row)[sb];
        u->d = b.d;
        u->m = b.m;
        qs = b.qs;
      }
      for (int e = 0; e < 16; ++e) {
        u->q[e] = qs[e] & 0x0f;
        u->q[e + 16] = qs[e] >> 4;
      }
      return;
    }
    case DType::kQ5_0:
    case DType::kQ5_1: {
      const uint8_t *qs, *qh;
      if (t == DType::kQ5_0) {
        const auto& b = reinterpret_cast<const BlockQ5_0*>(row)[sb];
        u->d = b.d;
        qs = b.qs;
        qh = b.qh;
      } else {
        const auto& b = reinterpret_cast<const BlockQ5_1*>(row)[sb];
        u->d = b.d;
        u->m = b.m;
        qs = b.qs;
        qh = b.qh;
      }
      for (int e = 0; e < 32; ++e)
        u->q[e] = static_cast<uint8_t>((e < 16 ? qs[e] & 0x0f : qs[e - 16] >> 4) | ((qh[e / 8] >> (e % 8)) & 1) << 4);
      return;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const auto* p = row + sb * (t == DType::kQ4_K ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K));
      const auto* b4 = reinterpret_cast<const BlockQ4_K*>(p);
      const auto* b5 = reinterpret_cast<const BlockQ5_K*>(p);
      u->d = b4->d;
      u->m = b4->dmin;
      const uint8_t* qs = t == DType::kQ4_K ? b4->qs : b5->qs;
      for (int j = 0; j < 8; ++j) q4k_scale_min(b4->scales, j, &u->sc[j], &u->mn[j]);
      // Element 64 pr + l is the low nibble of qs[32 pr + l], 64 pr + 32 + l its high one (plain loops that
      // vectorize: per-element index arithmetic was most of a Q4_K model's load time).
      for (int pr = 0; pr < 4; ++pr)
        for (int l = 0; l < 32; ++l) {
          u->q[64 * pr + l] = qs[32 * pr + l] & 0x0f;
          u->q[64 * pr + 32 + l] = qs[32 * pr + l] >> 4;
        }
      if (t == DType::kQ5_K) {
        for (int pr = 0; pr < 4; ++pr)
          for (int l = 0; l < 32; ++l) {
            u->q[64 * pr + l] |= static_cast<uint8_t>(((b5->qh[l] >> (2 * pr)) & 1) << 4);
            u->q[64 * pr + 32 + l] |= static_cast<uint8_t>(((b5->qh[l] >> (2 * pr + 1)) & 1) << 4);
          }
      }
      return;
    }
    case DType::kQ2_K: {
      const auto& b = reinterpret_cast<const BlockQ2_K*>(row)[sb];
      u->d = b.d;
      u->m = b.dmin;
      for (int j = 0; j < 16; ++j) {
        u->sc[j] = b.scales[j] & 15;
        u->mn[j] = b.scales[j] >> 4;
      }
      for (int e = 0; e < kQKK; ++e) {
        const int h = e / 128, s = e / 32 % 4, l = e % 32;
        u->q[e] = static_cast<uint8_t>((b.qs[32 * h + l] >> (2 * s)) & 3);
      }
      return;
    }
    case DType::kQ3_K: {
      // The 3-bit quants, and the 6-bit scale - 32 as a signed scale.
      const auto& b = reinterpret_cast<const BlockQ3_K*>(row)[sb];
      u->d = b.d;
      for (int j = 0; j < 16; ++j) u->sc[j] = q3k_scale(b.scales, j) - 32;
      for (int e = 0; e < kQKK; ++e) {
        const int h = e / 128, s = e / 32 % 4, k = e / 16 % 2, l = e % 16;
        const int q = ((b.qs[32 * h + 16 * k + l] >> (2 * s)) & 3) | ((b.hmask[16 * k + l] >> (4 * h + s)) & 1) << 2;
        u->q[e] = static_cast<uint8_t>(q);
      }
      return;
    }
    case DType::kQ6_K: {
      const auto& b = reinterpret_cast<const BlockQ6_K*>(row)[sb];
      u->d = b.d;
      for (int j = 0; j < 16; ++j) u->sc[j] = b.scales[j];
      // Element 128 h + 32 s + l: a nibble of ql[64 h + 32 (s % 2) + l] (low for s < 2) and bits 2s, 2s + 1 of
      // qh[32 h + l].
      for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
          const uint8_t lo0 = b.ql[64 * h + l], lo1 = b.ql[64 * h + 32 + l], hi = b.qh[32 * h + l];
          u->q[128 * h + l] = static_cast<uint8_t>((lo0 & 0x0f) | (hi & 3) << 4);
          u->q[128 * h + 32 + l] = static_cast<uint8_t>((lo1 & 0x0f) | ((hi >> 2) & 3) << 4);
          u->q[128 * h + 64 + l] = static_cast<uint8_t>((lo0 >> 4) | ((hi >> 4) & 3) << 4);
          u->q[128 * h + 96 + l] = static_cast<uint8_t>((lo1 >> 4) | ((hi >> 6) & 3) << 4);
        }
      return;
    }
    default: CACHET_CHECK(false);
  }
}

}  // namespace

void repack_group(DType t, const uint8_t* src, size_t row_bytes, int n_rows, int64_t k, FloatPack fp,
                  uint8_t* dst) {
  CACHET_CHECK(packable(t) && n_rows >= 0 && n_rows <= kPackRows);
  if (packed_is_float(t) && fp == FloatPack::kHalfRows) {
    auto* out = reinterpret_cast<uint16_t*>(dst);
    std::memset(dst, 0, packed_group_bytes(t, k, fp));
    for (int r = 0; r < n_rows; ++r) {
      const auto* row = reinterpret_cast<const uint16_t*>(src + r * row_bytes);
      for (int64_t e = 0; e < k; ++e) out[e * kPackRows + r] = row[e];
    }
    return;
  }
  if (packed_is_float(t)) {
    // Each row widened to f32 and rounded to bf16 by the kernel table (both exact functions, the same bits in
    // every table; scalar per element was most of a 1B F16 model's load time), then dealt out in pairs.
    const Kernels& kern = kernels();
    const int64_t n_pairs = (k + 1) / 2;
    auto* out = reinterpret_cast<uint32_t*>(dst);
    std::memset(dst, 0, packed_group_bytes(t, k, fp));
    std::vector<float> f(k);
    std::vector<uint16_t> b(n_pairs * 2, 0);
    for (int r = 0; r < n_rows; ++r) {
      kern.dequantize_row(t, src + r * row_bytes, f.data(), k);
      kern.round_bf16(f.data(), k, b.data());
      for (int64_t p = 0; p < n_pairs; ++p)
        out[p * kPackRows + r] = static_cast<uint32_t>(b[2 * p]) | static_cast<uint32_t>(b[2 * p + 1]) << 16;
    }
    return;
  }
  const PackedLayout l = packed_layout(t);
  const int64_t n_super = k / (32 * l.blocks);
  CACHET_CHECK(n_super * 32 * l.blocks == k);
  const bool is_k = l.blocks > 1;
  const bool nibbles = packed_as(t) != DType::kQ8_0;
  const bool q6 = packed_as(t) == DType::kQ6_K;
  const bool q2 = t == DType::kQ2_K || t == DType::kQ3_K;  // 2-bit planes (Q3_K: and a high bit)
  const bool q3 = t == DType::kQ3_K;
  std::memset(dst, 0, packed_group_bytes(t, k, fp));
  Unpacked u;
  for (int64_t sb = 0; sb < n_super; ++sb) {
    uint8_t* sup = dst + sb * l.super_bytes();
    for (int r = 0; r < kPackRows; ++r) {
      if (r < n_rows) {
        unpack(t, src + r * row_bytes, sb, &u);
      } else {
        // Rows past n_rows: zero scales, and quants equal to the bias so their integer sums are 0 too (IQ4_NL,
        // whose grid has no 0: code 8, grid value 1; its zero scale alone makes the row 0; MXFP4: code 0).
        u = Unpacked();
        std::memset(u.q, t == DType::kMXFP4 ? 0 : packed_as(t) == DType::kIQ4_NL ? 8 : l.bias, sizeof(u.q));
      }
      if (is_k) {
        reinterpret_cast<uint16_t*>(sup)[r] = u.d;
        if (l.header == 64) reinterpret_cast<uint16_t*>(sup + 32)[r] = u.m;  // Dmin (Q4_K, Q5_K, Q2_K)
      }
      for (int b = 0; b < l.blocks; ++b) {
        uint8_t* blk = sup + l.header + b * l.block_bytes;
        const uint8_t* q = u.q + 32 * b;
        if (q2) {
          blk[r] = static_cast<uint8_t>(static_cast<int8_t>(u.sc[2 * b]));
          blk[16 + r] = static_cast<uint8_t>(static_cast<int8_t>(u.sc[2 * b + 1]));
          if (q3) {
            uint8_t hb[4] = {0, 0, 0, 0};
            for (int s = 0; s < 8; ++s)
              for (int i = 0; i < 4; ++i) hb[i] |= static_cast<uint8_t>(((q[4 * s + i] >> 2) & 1) << s);
            std::memcpy(blk + l.hi + r * 4, hb, 4);
          } else {
            blk[32 + r] = static_cast<uint8_t>(u.mn[2 * b]);
            blk[48 + r] = static_cast<uint8_t>(u.mn[2 * b + 1]);
          }
          for (int v = 0; v < 2; ++v) {
            uint8_t qb[4] = {0, 0, 0, 0};
            for (int w = 0; w < 4; ++w)
              for (int i = 0; i < 4; ++i) qb[i] |= static_cast<uint8_t>((q[4 * (4 * v + w) + i] & 3) << (2 * w));
            std::memcpy(blk + l.qs + v * 64 + r * 4, qb, 4);
          }
          continue;
        }
        if (q6) {
          blk[r] = static_cast<uint8_t>(static_cast<int8_t>(u.sc[2 * b]));
          blk[16 + r] = static_cast<uint8_t>(static_cast<int8_t>(u.sc[2 * b + 1]));
        } else if (is_k) {
          blk[r] = static_cast<uint8_t>(u.sc[b]);
          blk[16 + r] = static_cast<uint8_t>(u.mn[b]);
        } else {
          reinterpret_cast<uint16_t*>(blk)[r] = u.d;
          if (t == DType::kQ4_1 || t == DType::kQ5_1) reinterpret_cast<uint16_t*>(blk + 32)[r] = u.m;
        }
        // Row r's 4 bytes of each vector, built whole and stored at once (a read-modify-write per element and
        // bit plane was most of a K-quant model's load time).
        uint8_t* qs = blk + l.qs;
        if (!nibbles) {
          for (int s = 0; s < 8; ++s) std::memcpy(qs + s * 64 + r * 4, q + 4 * s, 4);
          continue;
        }
        uint8_t nib[16];  // byte 4s + i: element 4s + i low, element 16 + 4s + i (step s + 4) high
        for (int j = 0; j < 16; ++j) nib[j] = static_cast<uint8_t>((q[j] & 0x0f) | (q[16 + j] & 0x0f) << 4);
        for (int s = 0; s < 4; ++s) std::memcpy(qs + s * 64 + r * 4, nib + 4 * s, 4);
        if (q6) {
          for (int v = 0; v < 2; ++v) {
            uint8_t hb[4] = {0, 0, 0, 0};
            for (int w = 0; w < 4; ++w)
              for (int i = 0; i < 4; ++i) hb[i] |= static_cast<uint8_t>(((q[4 * (4 * v + w) + i] >> 4) & 3) << (2 * w));
            std::memcpy(blk + l.hi + v * 64 + r * 4, hb, 4);
          }
        } else if (l.hi != 0) {
          uint8_t hb[4] = {0, 0, 0, 0};
          for (int s = 0; s < 8; ++s)
            for (int i = 0; i < 4; ++i) hb[i] |= static_cast<uint8_t>(((q[4 * s + i] >> 4) & 1) << s);
          std::memcpy(blk + l.hi + r * 4, hb, 4);
        }
      }
    }
  }
}

}  // namespace cachet
