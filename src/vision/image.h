// Images as the vision encoders take them: 8-bit RGB, decoded from the bytes a client sends (JPEG through
// libjpeg-turbo, PNG through libpng, WebP through libwebp) with bounds on what a hostile file can make cachet do:
// the encoded size, the pixel count (so memory) and, for progressive JPEGs, the number of scans (so time). Every
// failure is a Status a server turns into a 400, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cachet/status.h"

namespace cachet {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // [height][width][3], rows top to bottom
};

struct ImageLimits {
  size_t max_bytes = 32u << 20;             // encoded size
  int64_t max_pixels = 40'000'000;          // width x height (about 120 MB as RGB)
  int max_side = 16384;                     // either side
  int max_jpeg_scans = 200;                 // progressive JPEG scans (each is a pass over the whole image)
};

// What the bytes are, from their signature: "jpeg", "png", "webp", or "" for none of these.
std::string image_format(const uint8_t* data, size_t n);

// Decodes JPEG, PNG or WebP to RGB: grey and palette images expanded, an alpha channel dropped (not composited),
// as llama.cpp and the Hugging Face processors' convert("RGB") do; 16-bit PNG channels reduced to 8 bits.
Result<Image> decode_image(const uint8_t* data, size_t n, const ImageLimits& limits = {});

// Reads a file and decodes it.
Result<Image> load_image(const std::string& path, const ImageLimits& limits = {});

}  // namespace cachet
