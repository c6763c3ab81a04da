// cachet quantize: rewrite a GGUF's weight matrices in another type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
// Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K, IQ4_NL, IQ4_XS, MXFP4_MOE, F16, BF16), keeping every metadata key, the tokenizer
// and the 1-D tensors (norms) as they are. The mixes follow llama.cpp's so files compare like for like
// (docs/quantize.md).
// cachet tensor: print a tensor's type, shape and value statistics, or write it dequantized as raw f32.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <regex>
#include <thread>

#include "base/thread_pool.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

namespace {

// llama_ftype values (general.file_type), which also name the mixes.
enum Ftype : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 7, kQ5_0 = 8, kQ5_1 = 9, kQ2_K = 10, kQ3_K_S = 11, kQ3_K_M = 12,
  kQ3_K_L = 13, kQ4_K_S = 14, kQ4_K_M = 15, kQ5_K_S = 16, kQ5_K_M = 17, kQ6_K = 18, kIQ4_NL = 25,
  kIQ4_XS = 30, kBF16 = 32, kMXFP4_MOE = 38,
};

struct Scheme {
  DType base;    // the type of every weight matrix the mix does not single out
  Ftype ftype;   // the mix, stored as general.file_type
};

const std::map<std::string, Scheme>& schemes() {
  static const std::map<std::string, Scheme> m = {
      {"F32", {DType::kF32, kF32}},         {"F16", {DType::kF16, kF16}},         {"BF16", {DType::kBF16, kBF16}},
      {"Q4_0", {DType::kQ4_0, kQ4_0}},      {"Q4_1", {DType::kQ4_1, kQ4_1}},      {"Q8_0", {DType::kQ8_0, kQ8_0}},
      {"Q5_0", {DType::kQ5_0, kQ5_0}},      {"Q5_1", {DType::kQ5_1, kQ5_1}},      {"Q2_K", {DType::kQ2_K, kQ2_K}},
      {"Q3_K_S", {DType::kQ3_K, kQ3_K_S}},  {"Q3_K_M", {DType::kQ3_K, kQ3_K_M}},
      {"Q3_K_L", {DType::kQ3_K, kQ3_K_L}},  {"Q3_K", {DType::kQ3_K, kQ3_K_M}},    {"Q4_K_S", {DType::kQ4_K, kQ4_K_S}},
      {"Q4_K_M", {DType::kQ4_K, kQ4_K_M}},  {"Q4_K", {DType::kQ4_K, kQ4_K_M}},    {"Q5_K_S", {DType::kQ5_K, kQ5_K_S}},
      {"Q5_K_M", {DType::kQ5_K, kQ5_K_M}},  {"Q5_K", {DType::kQ5_K, kQ5_K_M}},    {"Q6_K", {DType::kQ6_K, kQ6_K}},
      {"IQ4_NL", {DType::kIQ4_NL, kIQ4_NL}}, {"IQ4_XS", {DType::kIQ4_XS, kIQ4_XS}},
      {"MXFP4_MOE", {DType::kMXFP4, kMXFP4_MOE}}, {"MXFP4", {DType::kMXFP4, kMXFP4_MOE}},
  };
  return m;
}

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// llama.cpp's rule for which layers of attn_v / ffn_down get more bits in the _M mixes.
bool more_bits(int layer, int n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

// K-quant rows must be whole 256-element super-blocks; otherwise llama.cpp's fallbacks.
DType fit_row(DType t, int64_t ne0) {
  if (ne0 % 256 != 0) {
    if (t == DType::kIQ4_XS) t = DType::kIQ4_NL;
    if (t == DType::kQ2_K || t == DType::kQ3_K) t = DType::kQ4_0;
    if (t == DType::kQ4_K) t = DType::kQ5_0;
    if (t == DType::kQ5_K) t = DType::kQ5_1;
    if (t == DType::kQ6_K) t = DType::kQ8_0;
  }
  if (ne0 % 32 != 0 && !is_float(t)) t = DType::kF16;
  return t;
}

// The file's shape facts the mixes look at.
struct ModelShape {
  bool has_output = false;
  int n_layer = 0, n_expert = 0;  // n_expert 0: dense
  int n_gqa = 1;                  // query heads per KV head
};

// llama.cpp's choices (its llama_tensor_get_type, without an importance matrix) for the schemes cachet writes.
// (No Q2_K_S: llama.cpp refuses it without an importance matrix, which cachet does not compute.) With `pure`,
// every weight matrix takes the scheme's base type (llama-quantize --pure). Its counters of attn_v and
// ffn_down tensors are the layer numbers here (one of each per layer); its "70B" model type, which lifts a
// Q3_K/Q4_K attn_v to Q5_K, is taken as 80 layers.
DType target_type(const Scheme& s, const GgufTensorInfo& t, const ModelShape& shape, bool pure) {
  const int n_layer = shape.n_layer, n_expert = shape.n_expert;
  if (t.n_dims < 2 || t.name.size() < 7 || t.name.compare(t.name.size() - 7, 7, ".weight") != 0) return t.type;
  if (t.name.find("ffn_gate_inp.weight") != std::string::npos) return t.type;  // routers stay as they are
  if (pure) return fit_row(s.base, t.ne[0]);
  const Ftype f = s.ftype;
  // llama.cpp's MXFP4_MOE: the experts' 3-D tensors MXFP4, every other matrix (the output too) Q8_0.
  if (f == kMXFP4_MOE) return fit_row(t.n_dims >= 3 && t.ne[2] > 1 ? DType::kMXFP4 : DType::kQ8_0, t.ne[0]);
  const bool iq4 = f == kIQ4_NL || f == kIQ4_XS;
  const auto in = [&](std::initializer_list<Ftype> l) { return std::find(l.begin(), l.end(), f) != l.end(); };
  const auto has = [&](const char* part) { return t.name.find(part) != std::string::npos; };
  DType want = s.base;
  const bool output = t.name == "output.weight" || (!shape.has_output && t.name == "token_embd.weight");
  static const std::regex kLayer(R"(^blk\.(\d+)\.(attn_v|ffn_down|ffn_down_exps)\.weight$)");
  std::smatch m;
  const bool per_layer = std::regex_match(t.name, m, kLayer);
  const int i = per_layer ? std::stoi(m[1]) : 0;
  if (output) {
    if (!is_float(s.base) && s.base != DType::kQ8_0) want = DType::kQ6_K;
  } else if (per_layer && m[2] == "attn_v") {
    if (f == kQ2_K) want = shape.n_gqa >= 4 ? DType::kQ4_K : DType::kQ3_K;
    else if (f == kQ3_K_M) want = i < 2 ? DType::kQ5_K : DType::kQ4_K;
    else if (f == kQ3_K_L) want = DType::kQ5_K;
    else if (iq4 && shape.n_gqa >= 4) want = DType::kQ5_K;
    else if (in({kQ4_K_M, kQ5_K_M}) && more_bits(i, n_layer)) want = DType::kQ6_K;
    else if (f == kQ4_K_S && i < 4) want = DType::kQ5_K;
    if (n_layer == 80 && (want == DType::kQ3_K || want == DType::kQ4_K)) want = DType::kQ5_K;
    if (n_expert == 8) want = DType::kQ8_0;  // Mixtral-8x: attention is cheap next to the experts
  } else if (per_layer) {  // ffn_down, or its experts
    if (f == kQ2_K) want = DType::kQ3_K;
    else if (f == kQ3_K_M) want = i < n_layer / 16 ? DType::kQ5_K : DType::kQ4_K;
    else if (f == kQ3_K_L) want = DType::kQ5_K;
    else if (f == kQ4_K_M) { if (more_bits(i, n_layer)) want = DType::kQ6_K; }
    else if (iq4 && i < n_layer / 8) want = DType::kQ5_K;
    else if (f == kQ5_K_M && more_bits(i, n_layer)) want = DType::kQ6_K;
    else if (f == kQ4_K_S && i < n_layer / 8) want = DType::kQ5_K;
  } else if (has("attn_k.weight")) {
    if (n_expert == 8) want = DType::kQ8_0;
  } else if (has("attn_output.weight")) {
    if (n_expert == 8) {
      if (in({kQ2_K, kQ3_K_S, kQ3_K_M, kIQ4_NL, kQ4_K_S, kQ4_K_M, kIQ4_XS})) want = DType::kQ5_K;
    } else {
      if (f == kQ2_K) want = DType::kQ3_K;
      else if (f == kQ3_K_M) want = DType::kQ4_K;
      else if (f == kQ3_K_L) want = DType::kQ5_K;
    }
  } else if (has("attn_qkv.weight")) {  // fused QKV (Phi-3)
    if (in({kQ3_K_M, kQ3_K_L})) want = DType::kQ4_K;
    else if (f == kQ4_K_M) want = DType::kQ5_K;
    else if (f == kQ5_K_M) want = DType::kQ6_K;
  }
  return fit_row(want, t.ne[0]);
}

struct QuantizeArgs {
  std::string in, out, type;
  int threads = 0;
  bool allow_requantize = false;
  bool pure = false;
};

int quantize(const QuantizeArgs& a) {
  const auto it = schemes().find(a.type);
  if (it == schemes().end()) return fail(invalid_argument("unknown --type " + a.type));
  const Scheme& scheme = it->second;
  auto f = GgufFile::open(a.in);
  if (!f.is_ok()) return fail(f.status());
  const GgufFile& in = **f;
  std::string arch = "llama";
  if (auto s = in.get_string("general.architecture"); s.is_ok()) arch = *s;
  auto blocks = in.get_uint(arch + ".block_count");
  const int n_layer = blocks.is_ok() ? static_cast<int>(*blocks) : 0;
  auto experts = in.get_uint(arch + ".expert_count");
  ModelShape shape;
  shape.n_layer = n_layer;
  shape.n_expert = experts.is_ok() ? static_cast<int>(*experts) : 0;
  shape.has_output = in.find_tensor("output.weight") != nullptr;
  auto heads = in.get_uint(arch + ".attention.head_count"), kv_heads = in.get_uint(arch + ".attention.head_count_kv");
  if (heads.is_ok() && kv_heads.is_ok() && *kv_heads > 0) shape.n_gqa = static_cast<int>(*heads / *kv_heads);

  GgufWriter w;
  for (const std::string& key : in.keys()) {
    if (key == "general.file_type" || key == "general.quantization_version") continue;
    w.set_value(key, *in.find(key));
  }
  w.set_u32("general.file_type", scheme.ftype);
  w.set_u32("general.quantization_version", 2);

  ThreadPool pool(a.threads > 0 ? a.threads : static_cast<int>(std::thread::hardware_concurrency()));
  const auto t0 = std::chrono::steady_clock::now();
  size_t in_bytes = 0, out_bytes = 0;
  std::map<std::string, int> counts;
  for (const GgufTensorInfo& t : in.tensors()) {
    const DType to = target_type(scheme, t, shape, a.pure);
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + std::max(1, t.n_dims));
    in_bytes += t.n_bytes;
    ++counts[dtype_name(to)];
    if (to == t.type) {
      if (Status s = w.add_tensor(t.name, t.type, ne, std::vector<uint8_t>(t.data, t.data + t.n_bytes)); !s.is_ok())
        return fail(s);
      out_bytes += t.n_bytes;
      continue;
    }
    if (!is_float(t.type) && !a.allow_requantize)
      return fail(invalid_argument("tensor '" + t.name + "' is " + dtype_name(t.type) +
                                   ": quantize from F32/F16/BF16 (or pass --allow-requantize)"));
    if (!dtype_computable(t.type)) return fail(unimplemented(std::string("cannot read ") + dtype_name(t.type)));
    const int64_t K = t.ne[0], rows = t.n_elements() / K;
    const size_t in_rb = *row_bytes(t.type, K), out_rb = *row_bytes(to, K);
    std::vector<uint8_t> data(out_rb * rows);
    Status err = Status::ok();
    std::mutex mu;
    pool.parallel_for(rows, [&](int, int64_t r0, int64_t r1) {
      std::vector<float> row(K);
      for (int64_t r = r0; r < r1; ++r) {
        kernels().dequantize_row(t.type, t.data + r * in_rb, row.data(), K);
        if (Status s = quantize_row(to, row.data(), data.data() + r * out_rb, K); !s.is_ok()) {
          std::lock_guard<std::mutex> lock(mu);
          err = s;
          return;
        }
      }
    });
    if (!err.is_ok()) return fail(err);
    out_bytes += data.size();
    if (Status s = w.add_tensor(t.name, to, ne, std::move(data)); !s.is_ok()) return fail(s);
  }
  if (Status s = w.write(a.out); !s.is_ok()) return fail(s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string mix;
  for (const auto& [name, n] : counts) mix += (mix.empty() ? "" : ", ") + std::to_string(n) + " " + name;
  std::printf("%s -> %s (%s): %.1f MiB -> %.1f MiB in %.1f s; tensors: %s\n", a.in.c_str(), a.out.c_str(),
              a.type.c_str(), in_bytes / 1048576.0, out_bytes / 1048576.0, secs, mix.c_str());
  return 0;
}

int tensor(const std::string& model, const std::string& name, const std::string& out) {
  auto f = GgufFile::open(resolve_model_path(model));
  if (!f.is_ok()) return fail(f.status());
  const GgufTensorInfo* t = (*f)->find_tensor(name);
  if (!t) return fail(not_found("no tensor '" + name + "'"));
  if (!dtype_computable(t->type)) return fail(unimplemented(std::string("cannot read ") + dtype_name(t->type)));
  const int64_t K = t->ne[0], rows = t->n_elements() / K;
  const size_t rb = *row_bytes(t->type, K);
  std::vector<float> v(static_cast<size_t>(K) * rows);
  for (int64_t r = 0; r < rows; ++r) kernels().dequantize_row(t->type, t->data + r * rb, v.data() + r * K, K);
  if (!out.empty()) {
    FILE* fp = std::fopen(out.c_str(), "wb");
    if (!fp || std::fwrite(v.data(), sizeof(float), v.size(), fp) != v.size()) {
      if (fp) std::fclose(fp);
      return fail(io_error("cannot write " + out));
    }
    std::fclose(fp);
  }
  double sum = 0, sq = 0;
  float lo = v.empty() ? 0 : v[0], hi = lo;
  for (float x : v) {
    sum += x;
    sq += static_cast<double>(x) * x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  const double n = std::max<size_t>(1, v.size());
  std::printf("%s: %s %s, %zu bytes; min %g max %g mean %g rms %g\n", name.c_str(), dtype_name(t->type),
              t->shape_string().c_str(), static_cast<size_t>(t->n_bytes), lo, hi, sum / n, std::sqrt(sq / n));
  return 0;
}

}  // namespace

void add_quantize_commands(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* q = app.add_subcommand(
      "quantize", "rewrite a GGUF's weights as Q8_0, Q4_0, Q5_0/1, Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, Q6_K, IQ4_XS, MXFP4_MOE, ...");
  q->add_option("-m,--model", a->in, "input GGUF (F32, F16 or BF16 weights)")->required();
  q->add_option("-o,--output", a->out, "output GGUF")->required();
  std::vector<std::string> names;
  for (const auto& [n, s] : schemes()) names.push_back(n);
  q->add_option("--type", a->type, "target type or mix")->required()->check(CLI::IsMember(names));
  q->add_option("-t,--threads", a->threads);
  q->add_flag("--allow-requantize", a->allow_requantize, "also convert already-quantized tensors (lossy twice)");
  q->add_flag("--pure", a->pure, "every weight matrix in the type itself, no mix (llama-quantize --pure)");
  q->callback([a, exit_code] { *exit_code = quantize(*a); });

  auto model = std::make_shared<std::string>(), name = std::make_shared<std::string>(),
       out = std::make_shared<std::string>();
  CLI::App* t = app.add_subcommand("tensor", "a tensor's type, shape and value statistics; -o writes it as raw f32");
  t->add_option("-m,--model", *model, "GGUF file");
  t->add_option("name", *name, "tensor name")->required();
  t->add_option("-o,--output", *out, "write the dequantized values (float32, row-major) here");
  t->callback([model, name, out, exit_code] { *exit_code = tensor(*model, *name, *out); });
}

}  // namespace cachet::cli
