// The image decoders (JPEG, PNG, WebP through their libraries, behind cachet's limits) and the resize that
// follows: any bytes give an image or a clear error, within the limits' memory and time.
#include <cstdint>

#include "vision/image.h"
#include "vision/resize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachet;
  ImageLimits lim;
  lim.max_pixels = 4'000'000;  // within the fuzzer's memory limit
  lim.max_jpeg_scans = 64;
  auto img = decode_image(data, size, lim);
  if (!img.is_ok()) return 0;
  if (img->rgb.size() != static_cast<size_t>(img->width) * img->height * 3) __builtin_trap();
  (void)resize_image(*img, 16, 12, ResizeFilter::kBilinear);
  (void)resize_image(*img, 40, 3, ResizeFilter::kBicubic);
  return 0;
}
