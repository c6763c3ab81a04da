// The Python module `cachet._cachet` (nanobind) over the library API of include/cachet: LLM, SamplingParams,
// Completion, streamed events. python/cachet/__init__.py is the package users import. Errors come back as
// Python exceptions carrying the engine's message: ValueError for invalid arguments, FileNotFoundError for a
// missing file, OSError for other I/O errors, RuntimeError otherwise.
#include <nanobind/nanobind.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/unordered_map.h>
#include <nanobind/stl/vector.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "cachet/cachet.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

[[noreturn]] void raise(const cachet::Status& s) {
  switch (s.code()) {
    case cachet::StatusCode::kInvalidArgument:
    case cachet::StatusCode::kOutOfRange: throw nb::value_error(s.message().c_str());
    case cachet::StatusCode::kNotFound: {
      PyErr_SetString(PyExc_FileNotFoundError, s.message().c_str());
      throw nb::python_error();
    }
    case cachet::StatusCode::kIo: {
      PyErr_SetString(PyExc_OSError, s.message().c_str());
      throw nb::python_error();
    }
    default: throw std::runtime_error(s.message());
  }
}

template <typename T>
T unwrap(cachet::Result<T>&& r) {
  if (!r.is_ok()) raise(r.status());
  return std::move(r).value();
}

cachet::Request make_request(const nb::handle& prompt, const cachet::SamplingParams& params, bool ignore_eos) {
  cachet::Request r;
  if (nb::isinstance<nb::str>(prompt)) {
    r.prompt = nb::cast<std::string>(prompt);
  } else {
    r.prompt_ids = nb::cast<std::vector<int32_t>>(prompt);
    if (r.prompt_ids.empty()) throw nb::value_error("the prompt is empty");
  }
  r.params = params;
  r.ignore_eos = ignore_eos;
  return r;
}

std::vector<cachet::ChatMessage> make_messages(const std::vector<std::unordered_map<std::string, std::string>>& ms) {
  std::vector<cachet::ChatMessage> out;
  for (const auto& m : ms) {
    auto role = m.find("role"), content = m.find("content");
    if (role == m.end() || content == m.end()) throw nb::value_error("each message needs 'role' and 'content'");
    out.push_back({role->second, content->second});
  }
  return out;
}

// A generation running on its own thread; Python pulls its events (the GIL released while it waits). Closing or
// dropping the stream cancels the request.
class Stream {
 public:
  Stream(cachet::LLM& llm, cachet::Request r) {
    thread_ = std::thread([this, &llm, r = std::move(r)] {
      auto res = llm.generate(r, [this](const cachet::OutputEvent& e) {
        std::lock_guard<std::mutex> lk(mu_);
        events_.push_back(e);
        cv_.notify_all();
        return !cancelled_;
      });
      std::lock_guard<std::mutex> lk(mu_);
      if (!res.is_ok()) status_ = res.status();
      else completion_ = std::move(*res);
      done_ = true;
      cv_.notify_all();
    });
  }
  ~Stream() { close(); }

  cachet::OutputEvent next() {
    std::unique_lock<std::mutex> lk(mu_);
    {
      nb::gil_scoped_release release;
      cv_.wait(lk, [&] { return !events_.empty() || done_; });
    }
    if (!events_.empty()) {
      cachet::OutputEvent e = std::move(events_.front());
      events_.pop_front();
      return e;
    }
    if (!status_.is_ok()) raise(status_);
    throw nb::stop_iteration();
  }
  // The whole completion once the stream has ended (None before).
  std::optional<cachet::Completion> completion() {
    std::lock_guard<std::mutex> lk(mu_);
    return done_ ? completion_ : std::nullopt;
  }
  void close() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      cancelled_ = true;
    }
    if (thread_.joinable()) {
      nb::gil_scoped_release release;
      thread_.join();
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<cachet::OutputEvent> events_;
  bool done_ = false, cancelled_ = false;
  cachet::Status status_;
  std::optional<cachet::Completion> completion_;
  std::thread thread_;
};

}  // namespace

NB_MODULE(_cachet, m) {
  m.doc() = "cachet: LLM inference on CPUs";

  nb::enum_<cachet::FinishReason>(m, "FinishReason")
      .value("STOP", cachet::FinishReason::kStop)
      .value("LENGTH", cachet::FinishReason::kLength)
      .value("ABORTED", cachet::FinishReason::kAborted);

  nb::class_<cachet::SamplingParams>(m, "SamplingParams")
      .def(
          "__init__",
          [](cachet::SamplingParams* p, int max_tokens, float temperature, int top_k, float top_p, float min_p,
             float repetition_penalty, float frequency_penalty, float presence_penalty, uint64_t seed,
             std::vector<std::string> stop, int logprobs, std::unordered_map<int32_t, float> logit_bias) {
            new (p) cachet::SamplingParams();
            p->max_tokens = max_tokens;
            p->temperature = temperature;
            p->top_k = top_k;
            p->top_p = top_p;
            p->min_p = min_p;
            p->repetition_penalty = repetition_penalty;
            p->frequency_penalty = frequency_penalty;
            p->presence_penalty = presence_penalty;
            p->seed = seed;
            p->stop = std::move(stop);
            p->logprobs = logprobs;
            p->logit_bias = std::move(logit_bias);
          },
          "max_tokens"_a = 128, "temperature"_a = 0.0f, "top_k"_a = 0, "top_p"_a = 1.0f, "min_p"_a = 0.0f,
          "repetition_penalty"_a = 1.0f, "frequency_penalty"_a = 0.0f, "presence_penalty"_a = 0.0f, "seed"_a = 0,
          "stop"_a = std::vector<std::string>{}, "logprobs"_a = -1,
          "logit_bias"_a = std::unordered_map<int32_t, float>{})
      .def_rw("max_tokens", &cachet::SamplingParams::max_tokens)
      .def_rw("temperature", &cachet::SamplingParams::temperature)
      .def_rw("top_k", &cachet::SamplingParams::top_k)
      .def_rw("top_p", &cachet::SamplingParams::top_p)
      .def_rw("min_p", &cachet::SamplingParams::min_p)
      .def_rw("repetition_penalty", &cachet::SamplingParams::repetition_penalty)
      .def_rw("frequency_penalty", &cachet::SamplingParams::frequency_penalty)
      .def_rw("presence_penalty", &cachet::SamplingParams::presence_penalty)
      .def_rw("seed", &cachet::SamplingParams::seed)
      .def_rw("stop", &cachet::SamplingParams::stop)
      .def_rw("logprobs", &cachet::SamplingParams::logprobs)
      .def_rw("logit_bias", &cachet::SamplingParams::logit_bias);

  nb::class_<cachet::TokenInfo>(m, "TokenInfo")
      .def_ro("id", &cachet::TokenInfo::id)
      .def_ro("logprob", &cachet::TokenInfo::logprob)
      .def_prop_ro("top", [](const cachet::TokenInfo& t) {
        std::vector<std::pair<int32_t, float>> out;
        for (const auto& x : t.top) out.emplace_back(x.id, x.logprob);
        return out;
      });

  nb::class_<cachet::OutputEvent>(m, "OutputEvent")
      .def_ro("request", &cachet::OutputEvent::request)
      .def_ro("sample", &cachet::OutputEvent::sample)
      .def_ro("token", &cachet::OutputEvent::token)
      .def_ro("text", &cachet::OutputEvent::text)
      .def_ro("finish", &cachet::OutputEvent::finish);

  nb::class_<cachet::Completion>(m, "Completion")
      .def_ro("token_ids", &cachet::Completion::token_ids)
      .def_ro("text", &cachet::Completion::text)
      .def_ro("finish", &cachet::Completion::finish)
      .def_ro("tokens", &cachet::Completion::tokens)
      .def_ro("prompt_tokens", &cachet::Completion::prompt_tokens)
      .def_ro("cached_tokens", &cachet::Completion::cached_tokens)
      .def_ro("ttft_ms", &cachet::Completion::ttft_ms)
      .def("__repr__", [](const cachet::Completion& c) {
        return "Completion(text=" + nb::cast<std::string>(nb::repr(nb::str(c.text.c_str(), c.text.size()))) +
               ", tokens=" + std::to_string(c.token_ids.size()) + ", finish=" +
               cachet::finish_reason_name(c.finish) + ")";
      });

  nb::class_<Stream>(m, "Stream")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", &Stream::next)
      .def("close", &Stream::close, "Cancels the request (its KV blocks are freed at the next step).")
      .def_prop_ro("completion", &Stream::completion);

  nb::class_<cachet::LLM>(m, "LLM")
      .def(
          "__init__",
          [](cachet::LLM* self, const std::string& path, int threads, int64_t kv_memory_bytes, int max_running,
             const std::string& kv_type, bool prefix_cache, bool precise) {
            cachet::LLMConfig c;
            c.threads = threads;
            c.kv_memory_bytes = kv_memory_bytes;
            c.max_running = max_running;
            c.kv_type_k = c.kv_type_v = kv_type;
            c.prefix_cache = prefix_cache;
            c.precise = precise;
            std::unique_ptr<cachet::LLM> llm;
            {
              nb::gil_scoped_release release;
              auto r = cachet::LLM::load(path, c);
              if (r.is_ok()) llm = std::move(*r);
              else {
                nb::gil_scoped_acquire acquire;
                raise(r.status());
              }
            }
            new (self) cachet::LLM(std::move(*llm));
          },
          "path"_a, "threads"_a = 0, "kv_memory_bytes"_a = int64_t{512} << 20, "max_running"_a = 64,
          "kv_type"_a = "f16", "prefix_cache"_a = true, "precise"_a = false)
      .def(
          "generate",
          [](cachet::LLM& llm, const nb::handle& prompts, const cachet::SamplingParams& params, bool ignore_eos) {
            std::vector<cachet::Request> rs;
            const bool one = nb::isinstance<nb::str>(prompts) ||
                             (nb::len(prompts) > 0 && nb::isinstance<nb::int_>(prompts[0]));
            if (one) rs.push_back(make_request(prompts, params, ignore_eos));
            else
              for (nb::handle p : prompts) rs.push_back(make_request(p, params, ignore_eos));
            std::vector<cachet::Completion> out;
            {
              nb::gil_scoped_release release;
              auto r = llm.generate(rs);
              nb::gil_scoped_acquire acquire;
              out = unwrap(std::move(r));
            }
            return out;
          },
          "prompts"_a, "params"_a = cachet::SamplingParams(), "ignore_eos"_a = false,
          "Generates for a prompt (text or token ids) or a list of them, batched; one Completion each.")
      .def(
          "stream",
          [](cachet::LLM& llm, const nb::handle& prompt, const cachet::SamplingParams& params, bool ignore_eos) {
            return std::make_unique<Stream>(llm, make_request(prompt, params, ignore_eos));
          },
          "prompt"_a, "params"_a = cachet::SamplingParams(), "ignore_eos"_a = false, nb::keep_alive<0, 1>(),
          "Iterates over the OutputEvents of one prompt as they are generated.")
      .def(
          "chat",
          [](cachet::LLM& llm, const std::vector<std::unordered_map<std::string, std::string>>& messages,
             const cachet::SamplingParams& params) {
            auto ms = make_messages(messages);
            nb::gil_scoped_release release;
            auto r = llm.chat(ms, params);
            nb::gil_scoped_acquire acquire;
            return unwrap(std::move(r));
          },
          "messages"_a, "params"_a = cachet::SamplingParams(),
          "One reply to a conversation ([{'role': ..., 'content': ...}]) through the model's chat template.")
      .def(
          "embed",
          [](cachet::LLM& llm, const nb::handle& inputs, std::optional<std::string> pooling, bool normalize,
             int dimensions, bool truncate) {
            cachet::EmbedParams p;
            if (pooling) {
              p.pooling = cachet::pooling_from_name(*pooling);
              if (!p.pooling) throw nb::value_error("pooling must be 'mean', 'cls', 'last', 'rank' or 'none'");
            }
            p.normalize = normalize;
            p.dimensions = dimensions;
            p.truncate = truncate;
            // One text, one list of token ids, or a list of either.
            const bool one = nb::isinstance<nb::str>(inputs) ||
                             (nb::len(inputs) > 0 && nb::isinstance<nb::int_>(inputs[0]));
            std::vector<nb::handle> items;
            if (one) items.push_back(inputs);
            else
              for (nb::handle x : inputs) items.push_back(x);
            std::vector<std::string> texts;
            std::vector<std::vector<int32_t>> ids;
            for (nb::handle x : items) {
              if (nb::isinstance<nb::str>(x)) texts.push_back(nb::cast<std::string>(x));
              else ids.push_back(nb::cast<std::vector<int32_t>>(x));
            }
            if (!texts.empty() && !ids.empty()) throw nb::value_error("inputs mix texts and token ids");
            std::vector<std::vector<float>> out;
            {
              nb::gil_scoped_release release;
              auto r = texts.empty() ? llm.embed(ids, p) : llm.embed(texts, p);
              nb::gil_scoped_acquire acquire;
              out = unwrap(std::move(r));
            }
            // Pooling none: each input's vectors, one list per token.
            const std::optional<cachet::Pooling> used = p.pooling ? p.pooling : llm.info().pooling;
            nb::list result;
            const size_t d = static_cast<size_t>(llm.info().n_embd);
            for (const auto& v : out) {
              if (used != cachet::Pooling::kNone) {
                result.append(nb::cast(v));
                continue;
              }
              nb::list rows;
              for (size_t at = 0; at < v.size(); at += d) rows.append(nb::cast(std::vector<float>(v.begin() + at, v.begin() + at + d)));
              result.append(rows);
            }
            return result;
          },
          "inputs"_a, "pooling"_a = nb::none(), "normalize"_a = true, "dimensions"_a = 0, "truncate"_a = false,
          "Embeddings (lists of floats) of a text, token ids, or a list of either; pooling as the model's file says "
          "unless given ('mean', 'cls', 'last', 'rank'; 'none': a list of vectors per input, one per token).")
      .def(
          "rerank",
          [](cachet::LLM& llm, const std::string& query, const std::vector<std::string>& documents) {
            std::vector<float> out;
            {
              nb::gil_scoped_release release;
              auto r = llm.rerank(query, documents);
              nb::gil_scoped_acquire acquire;
              out = unwrap(std::move(r));
            }
            return out;
          },
          "query"_a, "documents"_a,
          "One relevance score per document (higher: more relevant), from a reranker model's classifier head.")
      .def(
          "apply_chat_template",
          [](cachet::LLM& llm, const std::vector<std::unordered_map<std::string, std::string>>& messages,
             bool add_generation_prompt) {
            return unwrap(llm.apply_chat_template(make_messages(messages), add_generation_prompt));
          },
          "messages"_a, "add_generation_prompt"_a = true)
      .def(
          "tokenize",
          [](cachet::LLM& llm, const std::string& text, bool add_special, bool parse_special) {
            return unwrap(llm.tokenize(text, add_special, parse_special));
          },
          "text"_a, "add_special"_a = true, "parse_special"_a = true)
      .def(
          "detokenize", [](cachet::LLM& llm, const std::vector<int32_t>& ids) { return unwrap(llm.detokenize(ids)); },
          "ids"_a)
      .def_prop_ro("n_vocab", [](cachet::LLM& llm) { return llm.info().n_vocab; })
      .def_prop_ro("n_ctx_train", [](cachet::LLM& llm) { return llm.info().n_ctx_train; })
      .def_prop_ro("architecture", [](cachet::LLM& llm) { return llm.info().architecture; });
}
