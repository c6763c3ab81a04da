// Images inside a prompt: where each one's rows go, the pixels the encoder reads (preprocessed once, off the
// engine thread), and the content hash that keys the prefix cache. A prompt with images is a token sequence in
// which each image holds n_output_tokens() positions; their ids are derived from the image's hash (negative, so
// never a vocabulary id), so two prompts match in the prefix cache exactly as far as their text and pictures
// agree, and the cached K/V of an image is reused only for the same pixels.
//
// Front ends write an image into text with kImageMarker, in order (build_image_prompt turns markers and encoded
// images into ids and PromptImages, with the model family's framing around each image's rows).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cachet/llm.h"
#include "cachet/status.h"
#include "vision/image.h"
#include "vision/vision_encoder.h"

namespace cachet {

class Tokenizer;
class VisionEncoder;

struct PromptImage {
  int pos = 0;                                   // its first row's position in the prompt
  std::shared_ptr<const EncoderInput> pixels;    // VisionEncoder::preprocess's output
  ImageGrid grid;                                // the rows it becomes (grid.rows() positions from pos)
  uint64_t hash = 0;                             // of the pixels
};

// 64-bit hash of a preprocessed image (its size and bytes).
uint64_t hash_pixels(const EncoderInput& pixels);

// M-RoPE positions (time, height, width) of the token at cache position `pos` in a prompt with these images (in
// position order), as Qwen-VL places them: an image's rows all at the time its first row would have, each
// shifted by its row and column in the grid; the image then takes max(grid.x, grid.y) positions, not its row
// count, so the text after it continues from there.
void mrope_position(const std::vector<PromptImage>& images, int pos, int32_t out[3]);
// The placeholder id of row `row` of the image with this hash: negative, different for every row.
int32_t image_row_id(uint64_t hash, int row);

// The text a model family writes before and after an image's rows (Gemma 3: "\n\n<start_of_image>" and
// "<end_of_image>\n\n", as its Hugging Face processor expands the template's <start_of_image>).
struct ImageFraming {
  std::string before, after;
};
ImageFraming image_framing(const VisionConfig& c);

struct ImagePrompt {
  std::vector<int32_t> ids;  // image rows hold image_row_id()s
  std::vector<PromptImage> images;
};

// Splits text at kImageMarker (as many markers as images, in order), tokenizes the pieces (special tokens
// parsed; add_special for the whole prompt's BOS) and puts each image, decoded within `limits` and
// preprocessed, framed at its marker. Errors (each naming the image by its index): a marker count that does not
// match, an image that does not decode.
Result<ImagePrompt> build_image_prompt(const Tokenizer& tok, const VisionEncoder& enc, std::string_view text,
                                       const std::vector<std::string>& images, bool add_special,
                                       const ImageLimits& limits = {});

}  // namespace cachet
