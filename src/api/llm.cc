// LLM: loading, the tokenizer and the chat template (generation is in llm_generate.cc).
#include <algorithm>

#include "api/llm_impl.h"
#include "chat/chat_template.h"
#include "engine/engine.h"
#include "engine/spec_options.h"
#include "engine/step_budget.h"
#include "engine/text_stream.h"
#include "io/gguf.h"

namespace cachet {

const char* finish_reason_name(FinishReason f) {
  switch (f) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAborted: return "abort";
  }
  return "abort";
}

Result<EngineConfig> engine_config(const LLMConfig& c, const Model& model) {
  EngineConfig e;
  auto k = kv_type_from_name(c.kv_type_k), v = kv_type_from_name(c.kv_type_v);
  if (!k || !v)
    return invalid_argument("unknown KV cache type '" + (k ? c.kv_type_v : c.kv_type_k) + "' (one of " +
                            kv_type_names() + ")");
  e.kv_type = KvTypes(*k, *v);
  if (c.kv_memory_bytes <= 0) return invalid_argument("the KV cache memory must be positive");
  if (c.max_running < 1) return invalid_argument("max_running must be at least 1");
  if (c.max_batch_tokens < 0 || c.prefill_chunk < 0)
    return invalid_argument("max_batch_tokens and prefill_chunk must be 0 (chosen for the model) or more");
  if (c.max_waiting < 1) return invalid_argument("max_waiting must be at least 1");
  e.kv_memory_bytes = c.kv_memory_bytes;
  e.block_size = c.block_size;
  if (c.kv_tokens > 0) {
    if (c.block_size <= 0) return invalid_argument("the KV block size must be positive");
    const int64_t blocks = (c.kv_tokens + c.block_size - 1) / c.block_size;
    if (blocks > (int64_t{1} << 30)) return invalid_argument("kv_tokens is too large");
    e.n_blocks = static_cast<int>(blocks);
  }
  e.max_running = c.max_running;
  e.max_batch_tokens = c.max_batch_tokens > 0 ? c.max_batch_tokens : step_token_budget(model);
  e.prefill_chunk = c.prefill_chunk > 0 ? c.prefill_chunk : std::min(256, e.max_batch_tokens);
  e.prefix_cache = c.prefix_cache;
  e.state_checkpoint_every = c.state_checkpoint_every;
  if (c.encoder_layers_per_step < 0) return invalid_argument("encoder_layers_per_step must be 0 or more");
  e.encoder_layers_per_step = c.encoder_layers_per_step;
  CACHET_RETURN_IF_ERROR(kv_types_fit(model.config(), e.kv_type));
  return e;
}

Result<std::vector<int32_t>> LLM::Impl::prompt_ids(const Request& r) const {
  if (!r.prompt_ids.empty()) return r.prompt_ids;
  if (!tok) return invalid_argument("this model file has no tokenizer: give the prompt as token ids");
  std::vector<int32_t> ids = tok->encode(r.prompt, r.add_special, /*parse_special=*/true);
  if (ids.empty()) return invalid_argument("the prompt is empty");
  return ids;
}

Result<ImagePrompt> LLM::Impl::prompt(const Request& r) const {
  if (r.images.empty()) {
    CACHET_ASSIGN_OR_RETURN(std::vector<int32_t> ids, prompt_ids(r));
    return ImagePrompt{std::move(ids), {}};
  }
  if (!vision) return invalid_argument("this model was loaded without a projector file (mmproj): it takes no images");
  if (!r.prompt_ids.empty() || !tok) return invalid_argument("a request with images needs a text prompt");
  std::string text = r.prompt;
  if (text.find(kImageMarker) == std::string::npos) {  // no markers: the images go first
    std::string marks;
    for (size_t i = 0; i < r.images.size(); ++i) marks += kImageMarker;
    text = marks + text;
  }
  return build_image_prompt(*tok, *vision, text, r.images, r.add_special);
}

Result<std::unique_ptr<LLM>> make_llm(std::unique_ptr<Model> model, const LLMConfig& config,
                                      std::unique_ptr<Tokenizer> tokenizer) {
  auto impl = std::make_unique<LLM::Impl>();
  impl->config = config;
  CACHET_ASSIGN_OR_RETURN(EngineConfig ec, engine_config(config, *model));
  if (const GgufFile* g = model->gguf(); g && g->find("tokenizer.ggml.model")) {
    if (!tokenizer) {
      CACHET_ASSIGN_OR_RETURN(tokenizer, Tokenizer::from_gguf(*g));
    }
    impl->tok = std::move(tokenizer);
    if (auto t = g->get_string("tokenizer.chat_template"); t.is_ok()) impl->chat_template = *t;
  }
  if (!config.chat_template.empty()) impl->chat_template = config.chat_template;
  impl->end_ids = end_of_generation_ids(*model, impl->tok.get());
  ec.end_of_generation = impl->end_ids;
  CACHET_RETURN_IF_ERROR(load_speculation(config.speculation, config.rope, *model, &ec, &impl->draft));
  if (!config.mmproj.empty()) {
    std::shared_ptr<ThreadPool> pool = model->shared_pool();
    if (!pool) pool = std::make_shared<ThreadPool>(model->pool().n_threads());
    CACHET_ASSIGN_OR_RETURN(impl->vision, VisionEncoder::load(config.mmproj, pool));
    ec.vision = impl->vision.get();
  }
  CACHET_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(*model, ec));
  impl->draft_shares_target_kv = engine->draft_proposer() && engine->draft_proposer()->shares_target_kv();
  impl->model = std::move(model);
  impl->service = std::make_unique<EngineService>(std::move(engine), config.max_waiting);
  return std::make_unique<LLM>(std::move(impl));
}

Result<std::unique_ptr<LLM>> LLM::load(const std::string& path, const LLMConfig& config) {
  LoadOptions lo;
  lo.n_threads = config.threads;
  lo.precise = config.precise;
  lo.rope = config.rope;
  CACHET_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, load_model(path, lo));
  return make_llm(std::move(model), config);
}

LLM::LLM(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LLM::~LLM() {
  if (impl_) impl_->service.reset();  // the engine thread ends before the models it runs
}

// The engine thread refers to the Impl (on the heap), never to the LLM object: moving it is moving the pointer.
LLM::LLM(LLM&&) noexcept = default;
LLM& LLM::operator=(LLM&& o) noexcept {
  if (this != &o) {
    if (impl_) impl_->service.reset();
    impl_ = std::move(o.impl_);
  }
  return *this;
}

const LLMConfig& LLM::config() const { return impl_->config; }

ModelInfo LLM::info() const {
  ModelInfo i;
  const ModelConfig& c = impl_->model->config();
  i.architecture = c.arch;
  if (const GgufFile* g = impl_->model->gguf())
    if (auto n = g->get_string("general.name"); n.is_ok()) i.name = *n;
  i.n_vocab = c.n_vocab;
  i.n_ctx_train = c.n_ctx_train;
  i.n_layer = c.n_layer;
  i.n_embd = c.n_embd;
  i.has_tokenizer = impl_->tok != nullptr;
  i.has_chat_template = !impl_->chat_template.empty();
  i.pooling = pooling_from_name(c.pooling);
  return i;
}

Result<std::vector<int32_t>> LLM::tokenize(const std::string& text, bool add_special, bool parse_special) const {
  if (!impl_->tok) return invalid_argument("this model file has no tokenizer");
  return impl_->tok->encode(text, add_special, parse_special);
}

Result<std::string> LLM::detokenize(const std::vector<int32_t>& ids) const {
  if (!impl_->tok) return invalid_argument("this model file has no tokenizer");
  for (int32_t id : ids)
    if (id < 0 || id >= impl_->tok->n_vocab())
      return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary");
  return impl_->tok->decode(ids);
}

Result<std::string> LLM::apply_chat_template(const std::vector<ChatMessage>& messages,
                                             bool add_generation_prompt) const {
  if (!impl_->tok || impl_->chat_template.empty())
    return invalid_argument("the model file has no chat template (tokenizer.chat_template)");
  ChatTemplateInputs in;
  for (const ChatMessage& m : messages) in.messages.push_back({{"role", m.role}, {"content", m.content}});
  in.add_generation_prompt = add_generation_prompt;
  const Tokenizer& t = *impl_->tok;
  if (t.bos()) in.bos_token = t.token_text(*t.bos());
  if (t.eos()) in.eos_token = t.token_text(*t.eos());
  return render_chat_template(impl_->chat_template, in);
}

}  // namespace cachet
