// cachet info: load and validate everything `run` would, then print the config, tensors and KV cost.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/cpu_features.h"
#include "io/gguf.h"
#include "kernels/kernels.h"
#include "vision/vision_encoder.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

namespace {

std::string shape_of(const TensorView& t) {
  std::string s = "[" + std::to_string(t.ne[0]);
  int last = 3;
  while (last > 0 && t.ne[last] == 1) --last;
  for (int d = 1; d <= last; ++d) s += ", " + std::to_string(t.ne[d]);
  return s + "]";
}

// What the kernels see: the CPU's name, the ISA features cpuid reports, every table it can run and the one chosen
// (CACHET_ISA may force a lower one), and how that table computes with F16/BF16 weights.
nlohmann::json cpu_json() {
  nlohmann::json tables = nlohmann::json::array();
  for (const Kernels* k : supported_kernels()) tables.push_back(isa_name(k->isa));
  const Kernels& k = kernels();
  const CpuSignature sig = cpu_signature();
  return {{"model", cpu_model_name()},
          {"description", cpu_description()},
          {"vendor", sig.vendor},
          {"family", sig.family},
          {"cpu_model", sig.model},
          {"stepping", sig.stepping},
          {"microarchitecture", cpu_microarchitecture(sig)},
          {"features", cpu_features().to_string()},
          {"tables", tables},
          {"table", isa_name(k.isa)},
          {"float_weights", k.float_pack == FloatPack::kBf16Pairs ? "bf16" : "f32"},
          {"mpi", tp_mpi_library()}};
}

int cpu_info(bool json) {
  if (Status s = kernel_choice(); !s.is_ok()) return fail(s);
  const nlohmann::json j = cpu_json();
  if (json) {
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("cpu: %s\n", j["description"].get<std::string>().c_str());
  std::printf("features: %s\n", j["features"].get<std::string>().c_str());
  std::string tables;
  for (const auto& t : j["tables"]) tables += (tables.empty() ? "" : " ") + t.get<std::string>();
  std::printf("tables: %s\n", tables.c_str());
  std::printf("kernels: %s (F16/BF16 weights in %s arithmetic)\n", j["table"].get<std::string>().c_str(),
              j["float_weights"].get<std::string>().c_str());
  const std::string mpi = j["mpi"].get<std::string>();
  std::printf("mpi: %s\n", mpi.empty() ? "none (built without MPI: no --tp)" : mpi.c_str());
  return 0;
}

// A projector file (general.architecture "clip"): what the encoder is, what an image becomes, and its cost.
int projector_info(const std::string& path, bool json) {
  auto e = VisionEncoder::load(path, std::make_shared<ThreadPool>(1));
  if (!e.is_ok()) return fail(e.status());
  const VisionConfig& c = (*e)->config();
  size_t bytes = 0;
  for (const auto& t : (*e)->file().tensors()) bytes += t.n_bytes;
  // An image_size square picture (gemma3: every picture; qwen3vl: its size varies with the picture's).
  const int side = static_cast<int>(c.image_size);
  const ImageGrid in = *(*e)->input_size(side, side), grid = (*e)->output_grid(in.x, in.y);
  const double P = static_cast<double>(in.x / c.patch_size) * (in.y / c.patch_size), D = static_cast<double>(c.n_embd);
  const double M = static_cast<double>(c.n_merge * c.n_merge) * D;  // a merged row's width (qwen3vl)
  const double head = c.projector == ProjectorType::kGemma3
                          ? 2.0 * grid.rows() * D * c.n_embd_out
                          : (1.0 + c.n_deepstack) * grid.rows() * (2 * M * M + 2 * M * c.n_embd_out);
  const double flops = 2 * P * 3 * c.patch_size * c.patch_size * D +
                       c.n_layer * (2 * P * (4 * D * D + 2 * D * c.n_ff) + 4 * P * P * D) + head;
  nlohmann::json j = {{"projector", c.projector_name}, {"image_size", c.image_size}, {"patch_size", c.patch_size},
                      {"patches", c.n_patches()}, {"n_embd", c.n_embd}, {"n_ff", c.n_ff}, {"n_layer", c.n_layer},
                      {"n_head", c.n_head}, {"rows_per_image", grid.rows()}, {"row_width", c.row_width()},
                      {"deepstack_rows", c.n_deepstack}, {"mrope", c.mrope},
                      {"size_kept", c.projector != ProjectorType::kGemma3},
                      {"two_way_attention", c.bidirectional}, {"weight_bytes", bytes},
                      {"gflop_per_image", flops / 1e9}};
  if (json) {
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("projector: %s (%s)\n", path.c_str(), c.projector_name.c_str());
  std::printf("encoder: ViT of %lld layers, %lld wide (%lld heads, FFN %lld), %lld px images in %lld px patches "
              "(%lld)\n", static_cast<long long>(c.n_layer), static_cast<long long>(c.n_embd),
              static_cast<long long>(c.n_head), static_cast<long long>(c.n_ff), static_cast<long long>(c.image_size),
              static_cast<long long>(c.patch_size), static_cast<long long>(c.n_patches()));
  if (c.projector == ProjectorType::kGemma3) {
    std::printf("an image becomes %d rows of %lld (the language model's width), seen %s\n", grid.rows(),
                static_cast<long long>(c.n_embd_out), c.bidirectional ? "both ways among themselves" : "causally");
  } else {
    std::printf("an image keeps its aspect, resized to whole %lld px blocks, %lld..%lld rows (%d for %d px square) "
                "of %lld (%lld deepstack rows beside the model's %lld), placed by M-RoPE\n",
                static_cast<long long>(c.patch_size * c.n_merge), static_cast<long long>(c.min_rows),
                static_cast<long long>(c.max_rows), grid.rows(), side, static_cast<long long>(c.row_width()),
                static_cast<long long>(c.n_deepstack), static_cast<long long>(c.n_embd_out));
  }
  std::printf("weights: %zu bytes (%.2f MiB); %.1f GFLOP per image (that size)\n", bytes, bytes / 1048576.0, flops / 1e9);
  return 0;
}

int info(const std::string& model_flag, bool json) {
  if (auto g = GgufFile::open(resolve_model_path(model_flag)); g.is_ok())
    if (auto a = (*g)->get_string("general.architecture"); a.is_ok() && *a == "clip")
      return projector_info(resolve_model_path(model_flag), json);
  auto m = load(model_flag, 1);
  if (!m.is_ok()) return fail(m.status());
  const Model& model = **m;
  const ModelConfig& c = model.config();
  size_t total = 0;
  for (const auto& t : model.tensors()) total += t.n_bytes();
  if (json) {
    nlohmann::json j;
    nlohmann::json cfg;
#define CACHET_JSON_FIELD(type, name, def, desc) cfg[#name] = c.name;
    CACHET_MODEL_CONFIG_FIELDS(CACHET_JSON_FIELD)
#undef CACHET_JSON_FIELD
    j["config"] = cfg;
    j["tensors"] = nlohmann::json::array();
    for (const auto& t : model.tensors()) {
      std::vector<int64_t> ne(t.ne.begin(), t.ne.end());
      while (ne.size() > 1 && ne.back() == 1) ne.pop_back();
      j["tensors"].push_back({{"name", t.name}, {"type", dtype_name(t.type)}, {"shape", ne}, {"bytes", t.n_bytes()}});
    }
    j["weight_bytes"] = total;
    j["kv_bytes_per_token"] = {{"f16", c.kv_bytes_per_token(2)}, {"f32", c.kv_bytes_per_token(4)}};
    if (c.n_recurrent_layers() > 0)
      j["state_bytes_per_sequence"] = c.state_bytes_per_seq();
    j["cpu"] = cpu_json();
    if (tp_size() > 1) j["tp"] = {{"ranks", tp_size()}, {"note", "config heads and kv_bytes_per_token are rank 0's share"}};
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("model: %s\n", resolve_model_path(model_flag).c_str());
  if (const GgufFile* g = model.gguf()) {
    std::printf("format: GGUF v%u, %zu metadata keys, %zu tensors, alignment %llu\n", g->version(), g->keys().size(),
                g->tensors().size(), static_cast<unsigned long long>(g->alignment()));
    for (const auto& k : g->keys()) std::printf("  %-40s %s\n", k.c_str(), g->find(k)->to_display().c_str());
  } else {
    std::printf("format: llama2.c checkpoint\n");
  }
  std::printf("config:\n%s", c.to_string().c_str());
  std::printf("tensors:\n  %-32s %-6s %-18s %12s\n", "name", "type", "shape", "bytes");
  for (const auto& t : model.tensors())
    std::printf("  %-32s %-6s %-18s %12zu\n", t.name.c_str(), dtype_name(t.type), shape_of(t).c_str(), t.n_bytes());
  std::printf("weights: %zu bytes (%.2f MiB)\n", total, total / 1048576.0);
  if (c.is_mla())
    std::printf("KV cache per token: %lld bytes in f16, %lld in f32 (%lld layers x one row of the %lld-wide latent | "
                "%lld rotated key dims; V is read from the latent, %lld heads decompressed from it)\n",
                static_cast<long long>(c.kv_bytes_per_token(2)), static_cast<long long>(c.kv_bytes_per_token(4)),
                static_cast<long long>(c.n_kv_layers()), static_cast<long long>(c.kv_lora_rank),
                static_cast<long long>(c.rope_dim), static_cast<long long>(c.n_head));
  else
    std::printf("KV cache per token: %lld bytes in f16, %lld in f32 (2 x %lld layers x %lld kv_dim)\n",
                static_cast<long long>(c.kv_bytes_per_token(2)), static_cast<long long>(c.kv_bytes_per_token(4)),
                static_cast<long long>(c.n_kv_layers()), static_cast<long long>(c.kv_dim()));
  if (c.n_recurrent_layers() > 0)
    std::printf("recurrent state per sequence: %lld bytes (%lld gated delta net layers: a %lld-wide conv window of %lld "
                "channels and %lld matrices of %lld x %lld, f32), whatever the sequence's length\n",
                static_cast<long long>(c.state_bytes_per_seq()), static_cast<long long>(c.n_recurrent_layers()),
                static_cast<long long>(c.ssm_conv_kernel - 1), static_cast<long long>(c.ssm_conv_dim()),
                static_cast<long long>(c.ssm_v_heads), static_cast<long long>(c.ssm_head_dim),
                static_cast<long long>(c.ssm_head_dim));
  std::printf("kernels: %s on %s (cpu: %s)\n", isa_name(kernels().isa), cpu_model_name().c_str(),
              cpu_features().to_string().c_str());
  if (tp_size() > 1)
    std::printf("tensor parallel: %d ranks; the config's head counts and the KV cache per token above are rank 0's "
                "share (%lld query / %lld KV heads; the metadata keys give the file's)\n",
                tp_size(), static_cast<long long>(c.n_head), static_cast<long long>(c.n_head_kv));
  return 0;
}

}  // namespace

void add_info_command(CLI::App& app, int* exit_code) {
  auto model = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto cpu = std::make_shared<bool>(false);
  CLI::App* c = app.add_subcommand("info", "validate a model file and print its config, tensors and KV cost");
  c->add_option("-m,--model", *model, "GGUF file or llama2.c checkpoint (default: SmolLM2-135M-Instruct)");
  c->add_flag("--json", *json, "print JSON");
  c->add_flag("--cpu", *cpu, "only the CPU: its model, ISA features, the kernel tables it can run and the one chosen");
  c->callback([model, json, cpu, exit_code] { *exit_code = *cpu ? cpu_info(*json) : info(*model, *json); });
}

}  // namespace cachet::cli
