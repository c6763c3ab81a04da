// cachet trace: prefill and N decode steps on a real model, printed as the execution-flow tree of the
// seeds: every op of one layer with this batch's shapes (then "x L layers"), the KV cache length before and
// after each step, and the phase.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

namespace {

struct Step {
  int n_tokens = 0, first_pos = 0, n_layer = 0;
  std::vector<TraceOp> ops;
  int32_t token_out = -1;
};

class Recorder : public Tracer {
 public:
  void begin_forward(int n_tokens, int first_pos, int n_layer) override {
    steps.push_back({n_tokens, first_pos, n_layer, {}, -1});
  }
  void op(TraceOp op) override { steps.back().ops.push_back(std::move(op)); }
  std::vector<Step> steps;
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

std::string show_text(const std::string& s) {
  std::string r = "\"";
  for (char c : s) r += c == '\n' ? std::string("\\n") : std::string(1, c);
  return r + "\"";
}

void print_ops(const Step& st, bool detailed) {
  auto line = [](const char* indent, const TraceOp& op) {
    std::string w = op.weight.empty() ? "" : op.weight + " " + shape_str(op.weight_shape) + " " + op.weight_type;
    std::printf("%s+-- %-10s %-44s %s -> %s  %s\n", indent, op.name.c_str(), w.c_str(), shape_str(op.in_shape).c_str(),
                shape_str(op.out_shape).c_str(), op.note.c_str());
  };
  size_t i = 0;
  if (i < st.ops.size()) line("|  ", st.ops[i++]);  // embed
  const size_t n_tail = 2;                        // final norm + head
  if (detailed) {
    std::printf("|  +-- layer 0 of %d:\n", st.n_layer);
    for (; i + n_tail < st.ops.size(); ++i) line("|  |  ", st.ops[i]);
    std::printf("|  +-- x %d layers (layers 1..%d repeat these ops)\n", st.n_layer, st.n_layer - 1);
  } else {
    std::printf("|  +-- %d layers: the same ops with %d token(s)\n", st.n_layer, st.n_tokens);
    i = st.ops.size() - n_tail;
  }
  for (; i < st.ops.size(); ++i) line("|  ", st.ops[i]);
}

}  // namespace

void add_trace_command(CLI::App& app, int* exit_code) {
  struct Args {
    std::string model, prompt, prompt_ids;
    int n = 3, threads = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("trace", "print the execution flow of prefill and decode steps with shapes");
  c->add_option("-m,--model", a->model, "model file (default: SmolLM2-135M-Instruct)");
  c->add_option("-p,--prompt", a->prompt, "prompt text");
  c->add_option("--prompt-ids", a->prompt_ids, "prompt as token ids");
  c->add_option("-n,--n-predict", a->n, "decode steps");
  c->add_option("-t,--threads", a->threads);
  c->add_flag("--json", a->json, "print JSON");
  c->callback([a, exit_code] {
    auto lm = load_with_prompt(a->model, a->threads, a->prompt, a->prompt_ids, "1");
    if (!lm.is_ok()) {
      *exit_code = fail(lm.status());
      return;
    }
    Model& model = *lm->model;
    const Tokenizer* tok = lm->tokenizer.get();
    const std::vector<int32_t>& prompt = lm->prompt;
    Recorder rec;
    model.set_tracer(&rec);
    GenerateOptions o;
    o.sampling.max_tokens = a->n + 1;  // the prefill's token, then n decode steps
    o.stop_at_eos = false;
    o.kv_type = DType::kF16;
    size_t step_i = 0;
    auto res = generate(model, prompt, o, [&](const TokenEvent& ev) {
      if (ev.id && step_i < rec.steps.size()) rec.steps[step_i++].token_out = *ev.id;
      return true;
    });
    model.set_tracer(nullptr);
    if (!res.is_ok()) {
      *exit_code = fail(res.status());
      return;
    }
    auto piece = [&](int32_t id) { return tok ? show_text(tok->token_to_piece(id, true)) : std::to_string(id); };
    const ModelConfig& cfg = model.config();
    if (a->json) {
      nlohmann::json j;
      j["model"] = {{"layers", cfg.n_layer}, {"d_model", cfg.n_embd}, {"heads", cfg.n_head}, {"kv_heads", cfg.n_head_kv},
                    {"head_dim", cfg.head_dim}, {"vocab", cfg.n_vocab}};
      j["prompt_ids"] = prompt;
      j["steps"] = nlohmann::json::array();
      for (size_t s = 0; s < rec.steps.size(); ++s) {
        const Step& st = rec.steps[s];
        nlohmann::json ops = nlohmann::json::array();
        for (const auto& op : st.ops)
          ops.push_back({{"op", op.name}, {"weight", op.weight}, {"weight_type", op.weight_type},
                         {"weight_shape", op.weight_shape}, {"in", op.in_shape}, {"out", op.out_shape},
                         {"note", op.note}});
        j["steps"].push_back({{"phase", s == 0 ? "prefill" : "decode"}, {"n_tokens", st.n_tokens},
                              {"first_pos", st.first_pos}, {"kv_before", st.first_pos},
                              {"kv_after", st.first_pos + st.n_tokens}, {"token_out", st.token_out},
                              {"layers", st.n_layer}, {"ops", ops}});
      }
      std::printf("%s\n", j.dump().c_str());
      *exit_code = 0;
      return;
    }
    std::printf("generate(%s, max_new_tokens=%d)  model: %s, %lld layers, d_model %lld, %lld heads / %lld KV heads x %lld\n",
                a->prompt.empty() ? a->prompt_ids.c_str() : show_text(a->prompt).c_str(), a->n + 1, cfg.arch.c_str(),
                static_cast<long long>(cfg.n_layer), static_cast<long long>(cfg.n_embd),
                static_cast<long long>(cfg.n_head), static_cast<long long>(cfg.n_head_kv),
                static_cast<long long>(cfg.head_dim));
    std::printf("|\n");
    for (size_t s = 0; s < rec.steps.size(); ++s) {
      const Step& st = rec.steps[s];
      if (s == 0) {
        std::printf("+-- PREFILL: %d tokens at positions 0..%d in one pass; KV cache %d -> %d positions\n", st.n_tokens,
                    st.n_tokens - 1, st.first_pos, st.first_pos + st.n_tokens);
        std::string ids;
        for (size_t i = 0; i < prompt.size(); ++i) ids += (i ? ", " : "") + std::to_string(prompt[i]);
        if (!a->prompt.empty()) std::printf("|  +-- tokenize(%s) -> [%s]\n", show_text(a->prompt).c_str(), ids.c_str());
      } else {
        std::printf("|\n+-- DECODE step %zu: token %s at position %d; KV cache %d -> %d positions\n", s,
                    piece(rec.steps[s - 1].token_out).c_str(), st.first_pos, st.first_pos, st.first_pos + st.n_tokens);
      }
      print_ops(st, s <= 1);
      std::printf("|  +-- sample (greedy) -> %s (%d)\n", piece(st.token_out).c_str(), st.token_out);
    }
    std::printf("+-- STOP (max_new_tokens)\n");
    *exit_code = 0;
  });
}

}  // namespace cachet::cli
