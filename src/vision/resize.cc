#include "vision/resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"

namespace cachet {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double filter_value(ResizeFilter f, double x) {
  x = std::fabs(x);
  if (f == ResizeFilter::kBilinear) return x < 1.0 ? 1.0 - x : 0.0;
  constexpr double a = -0.5;  // Pillow's bicubic (Keys, a = -0.5)
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// For each output pixel along one axis: the first input pixel, how many contribute, and their weights in fixed
// point (summing to about 1 << kPrecisionBits).
struct Taps {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;  // [out][ksize]
};

Taps taps_for(int in_size, int out_size, ResizeFilter f) {
  const double support_1 = f == ResizeFilter::kBilinear ? 1.0 : 2.0;
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = support_1 * filterscale;
  Taps t;
  t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  t.weights.assign(static_cast<size_t>(out_size) * t.ksize, 0);
  std::vector<double> w(t.ksize);
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    int lo = static_cast<int>(center - support + 0.5);
    int hi = static_cast<int>(center + support + 0.5);
    lo = std::max(lo, 0);
    hi = std::min(hi, in_size);
    const int cnt = hi - lo;
    double sum = 0.0;
    for (int i = 0; i < cnt; ++i) {
      w[i] = filter_value(f, (i + lo - center + 0.5) / filterscale);
      sum += w[i];
    }
    for (int i = 0; i < cnt; ++i) {
      const double v = sum != 0.0 ? w[i] / sum : w[i];
      const double fixed = v * static_cast<double>(1 << kPrecisionBits);
      t.weights[static_cast<size_t>(o) * t.ksize + i] = static_cast<int32_t>(fixed < 0 ? fixed - 0.5 : fixed + 0.5);
    }
    t.first[o] = lo;
    t.count[o] = cnt;
  }
  return t;
}

uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(std::clamp(v, 0, 255));
}

// Horizontal pass over rows [0, h): width in_w -> out_w.
std::vector<uint8_t> horizontal(const uint8_t* src, int in_w, int h, int out_w, const Taps& t) {
  std::vector<uint8_t> out(static_cast<size_t>(out_w) * h * 3);
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = src + static_cast<size_t>(y) * in_w * 3;
    uint8_t* dst = out.data() + static_cast<size_t>(y) * out_w * 3;
    for (int o = 0; o < out_w; ++o) {
      const int32_t* k = &t.weights[static_cast<size_t>(o) * t.ksize];
      const uint8_t* p = row + static_cast<size_t>(t.first[o]) * 3;
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int i = 0; i < t.count[o]; ++i, p += 3) {
        s0 += p[0] * k[i];
        s1 += p[1] * k[i];
        s2 += p[2] * k[i];
      }
      dst[o * 3 + 0] = clip8(s0);
      dst[o * 3 + 1] = clip8(s1);
      dst[o * 3 + 2] = clip8(s2);
    }
  }
  return out;
}

// Vertical pass: height in_h -> out_h, rows w pixels wide.
std::vector<uint8_t> vertical(const uint8_t* src, int w, int out_h, const Taps& t) {
  const size_t row = static_cast<size_t>(w) * 3;
  std::vector<uint8_t> out(row * out_h);
  std::vector<int32_t> acc(row);
  for (int o = 0; o < out_h; ++o) {
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    const int32_t* k = &t.weights[static_cast<size_t>(o) * t.ksize];
    for (int i = 0; i < t.count[o]; ++i) {
      const uint8_t* p = src + static_cast<size_t>(t.first[o] + i) * row;
      for (size_t j = 0; j < row; ++j) acc[j] += p[j] * k[i];
    }
    uint8_t* dst = out.data() + static_cast<size_t>(o) * row;
    for (size_t j = 0; j < row; ++j) dst[j] = clip8(acc[j]);
  }
  return out;
}

}  // namespace

Image resize_image(const Image& src, int width, int height, ResizeFilter filter) {
  CACHET_CHECK(width > 0 && height > 0 && src.width > 0 && src.height > 0);
  Image out;
  out.width = width;
  out.height = height;
  if (width == src.width && height == src.height) {
    out.rgb = src.rgb;
    return out;
  }
  // The order of the two passes changes the bytes (each rounds to 8 bits). Pillow (13.0, the version the tests
  // hold this to) runs the vertical pass first when the height shrinks by more than twice as many pixels as the
  // width does, else the horizontal one; llama.cpp's copy of the arithmetic always goes horizontal first, which
  // agrees for square images.
  const int dh = src.height - height, dw = src.width - width;
  const bool vertical_first = dh > 0 && dh > 2 * dw;
  if (vertical_first) {
    std::vector<uint8_t> v = vertical(src.rgb.data(), src.width, height, taps_for(src.height, height, filter));
    out.rgb = width == src.width ? std::move(v)
                                 : horizontal(v.data(), src.width, height, width, taps_for(src.width, width, filter));
    return out;
  }
  std::vector<uint8_t> h = width == src.width
                               ? src.rgb
                               : horizontal(src.rgb.data(), src.width, src.height, width,
                                            taps_for(src.width, width, filter));
  out.rgb = height == src.height ? std::move(h) : vertical(h.data(), width, height, taps_for(src.height, height, filter));
  return out;
}

}  // namespace cachet
