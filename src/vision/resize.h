// Resizing an RGB image the way Pillow's Image.resize does (its separable convolution with 8-bit fixed-point
// coefficients, widened when shrinking so it antialiases): the vision models' Hugging Face processors resize with
// Pillow, and llama.cpp's mtmd reproduces the same arithmetic, so the same bytes go into the encoder as there.
#pragma once

#include "vision/image.h"

namespace cachet {

enum class ResizeFilter { kBilinear, kBicubic };

// `src` resized to width x height (both > 0). Exactly Pillow's bytes for the filter.
Image resize_image(const Image& src, int width, int height, ResizeFilter filter);

}  // namespace cachet
