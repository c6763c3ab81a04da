// cachet encode-image: a projector's embeddings of one image (what the language model reads in its place), for
// checking an mmproj file against another engine and timing the encoder.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "tools/cachet/common.h"
#include "vision/vision_encoder.h"

namespace cachet::cli {

void add_encode_image_command(CLI::App& app, int* exit_code) {
  struct Args {
    std::string mmproj, image, out, pixels;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("encode-image", "run a projector (mmproj) on an image; print its shape and timing");
  c->add_option("--mmproj", a->mmproj, "projector GGUF (mmproj-*.gguf)")->required();
  c->add_option("--image", a->image, "JPEG, PNG or WebP file")->required();
  c->add_option("-o,--output", a->out, "write the embeddings here as raw little-endian f32, row by row");
  c->add_option("--pixels", a->pixels, "write the preprocessed image here as raw f32 [3][height][width]");
  c->add_option("-t,--threads", a->threads, "threads (default: all)");
  c->callback([a, exit_code] {
    using Clock = std::chrono::steady_clock;
    const int n = a->threads > 0 ? a->threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    auto enc = VisionEncoder::load(a->mmproj, std::make_shared<ThreadPool>(n));
    if (!enc.is_ok()) {
      *exit_code = fail(enc.status());
      return;
    }
    auto img = load_image(a->image);
    if (!img.is_ok()) {
      *exit_code = fail(img.status());
      return;
    }
    const VisionConfig& cfg = (*enc)->config();
    const auto t0 = Clock::now();
    auto in = (*enc)->preprocess(*img);
    if (!in.is_ok()) {
      *exit_code = fail(in.status());
      return;
    }
    const std::vector<float>& pixels = in->data;
    const auto t1 = Clock::now();
    const ImageGrid grid = (*enc)->output_grid(in->width, in->height);
    std::vector<float> out(static_cast<size_t>(grid.rows() * cfg.row_width()));
    if (Status st = (*enc)->encode(*in, out.data()); !st.is_ok()) {
      *exit_code = fail(st);
      return;
    }
    const auto t2 = Clock::now();
    for (const auto& [path, v] : {std::pair{a->out, &std::as_const(out)}, std::pair{a->pixels, &pixels}}) {
      if (path.empty()) continue;
      std::ofstream f(path, std::ios::binary);
      f.write(reinterpret_cast<const char*>(v->data()), static_cast<std::streamsize>(v->size() * sizeof(float)));
      if (!f) {
        *exit_code = fail(io_error("cannot write " + path));
        return;
      }
    }
    auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    nlohmann::json j = {{"projector", cfg.projector_name},
                        {"image", {img->width, img->height}},
                        {"input", {in->width, in->height}},
                        {"grid", {grid.x, grid.y}},
                        {"tokens", grid.rows()},
                        {"dim", cfg.row_width()},
                        {"threads", n},
                        {"preprocess_ms", ms(t1 - t0)},
                        {"encode_ms", ms(t2 - t1)},
                        {"scratch_bytes", (*enc)->scratch_bytes()}};
    std::printf("%s\n", j.dump().c_str());
  });
}

}  // namespace cachet::cli
