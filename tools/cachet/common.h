// Helpers shared by the CLI's subcommands.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cachet/llm.h"
#include "cachet/status.h"
#include "engine/spec_options.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace CLI {
class App;
}

namespace cachet {
class Tokenizer;
struct EngineConfig;
}

namespace cachet::cli {

// -m given, else $CACHET_MODEL, else the default model fetched by scripts/setup.sh.
std::string resolve_model_path(const std::string& flag);
std::string default_model_path();

Result<std::vector<int32_t>> parse_ids(const std::string& text);
Result<std::unique_ptr<Model>> load(const std::string& model_flag, int n_threads, bool precise = false,
                                    const RopeOverrides& rope = {});

// --kv-type (K and V), --kv-type-k, --kv-type-v (kv/kv_type.h); `fallback` when none is given.
struct KvFlags {
  std::string fallback = "f16";
  std::string both, k, v;
  KvTypes types() const;
  void apply(LLMConfig* c) const;  // the same into an LLMConfig's kv_type_k / kv_type_v
};
void add_kv_flags(CLI::App* c, KvFlags* f);

// --rope-scaling, --rope-scale, --rope-freq-base, --yarn-* (model/rope_scaling.h).
void add_rope_flags(CLI::App* c, RopeOverrides* r);

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the file has none (llama2.c checkpoints)
  std::vector<int32_t> prompt;           // filled by load_with_prompt
  ~LoadedModel();
  LoadedModel();
  LoadedModel(LoadedModel&&) noexcept;
};
Result<LoadedModel> load_with_tokenizer(const std::string& model_flag, int n_threads, bool precise = false,
                                        const RopeOverrides& rope = {});
// The prompt as token ids: `text` through the tokenizer (BOS as the vocabulary says, special tokens parsed),
// else the ids in `ids`, else `fallback_ids`.
Result<std::vector<int32_t>> prompt_tokens(const Tokenizer* tok, const std::string& text, const std::string& ids,
                                           const std::string& fallback_ids = "");

// load_with_tokenizer, then prompt_tokens into .prompt.
Result<LoadedModel> load_with_prompt(const std::string& model_flag, int n_threads, const std::string& text,
                                     const std::string& ids, const std::string& fallback_ids);

// --tp N (tools/cachet/tp_flags.cc): the option, the load options of this rank, and what load does after:
// rank 0 gets its shard wrapped to lead the others; every other rank serves rank 0 and exits there.
void add_tp_flag(CLI::App& app);
int tp_size();
Status tp_prepare(LoadOptions* o);
Result<std::unique_ptr<Model>> tp_finish_load(std::unique_ptr<Model> shard);
// load_model with this rank's shard: tp_prepare, load, tp_finish_load.
Result<std::unique_ptr<Model>> load_tp(const std::string& path, const LoadOptions& opts);
void tp_shutdown();  // at the end of main: stops the workers, MPI_Finalize
// The MPI library this binary was built with (its first line, e.g. "Open MPI v4.1.4, ...", "MPICH Version: 4.0.2"),
// or "" without MPI: a launcher must be the same implementation's (mpirun.openmpi, mpirun.mpich).
std::string tp_mpi_library();

// The LLM every generating command runs on: the model as load() loads it (this rank's shard under --tp), then
// make_llm with the config's engine settings.
Result<std::unique_ptr<LLM>> load_llm(const std::string& model_flag, const LLMConfig& config);

// A whole file's bytes.
Result<std::string> read_file(const std::string& path);
// --lines-json: every line of the file a JSON string.
Result<std::vector<std::string>> read_lines_json(const std::string& path);

// Figures of a completion for the summary lines: prompt tokens per second of the time to the first token,
// generated tokens after the first per second of the time between them, and that time's mean and percentiles.
double prefill_tok_per_s(const Completion& c);
double decode_tok_per_s(const Completion& c);
double tbt_mean_ms(const Completion& c);
double tbt_percentile_ms(const Completion& c, double p);

// Prints "error: <message>" to stderr and returns the exit code for a failed command.
int fail(const Status& s);

// "512MiB", "2GiB", "1000000" (bytes), or "0.25" (a fraction of physical memory).
Result<int64_t> parse_memory(const std::string& s);

// Speculative decoding flags (run, chat, serve, batch): --draft-model FILE, --lookup, --mtp, --draft-max K, --draft-vocab N,
// --draft-p-min P, --draft-own-kv, --draft-fixed; engine/spec_options.h load_speculation applies them.
void add_spec_flags(CLI::App* c, SpecOptions* o);

// Many prompts (one per line of a file) through the continuous-batching engine: `cachet batch`, and
// `cachet run -f FILE --parallel N`.
struct BatchOptions {
  std::string model, prompts_file, kv_memory = "512MiB";
  int parallel = 16, threads = 0, block_size = 16, chunk = 256;
  SamplingParams sampling;
  bool json = false, raw = false, ignore_eos = false;
  bool no_prefix_cache = false;
  SpecOptions spec;
  RopeOverrides rope;
  KvFlags kv;
};
int run_batch(const BatchOptions& o);

void add_run_command(CLI::App& app, int* exit_code);
void add_info_command(CLI::App& app, int* exit_code);
void add_synth_command(CLI::App& app, int* exit_code);
void add_logits_command(CLI::App& app, int* exit_code);
void add_tokenize_commands(CLI::App& app, int* exit_code);
void add_embed_command(CLI::App& app, int* exit_code);
void add_encode_image_command(CLI::App& app, int* exit_code);
void add_template_command(CLI::App& app, int* exit_code);
void add_chat_command(CLI::App& app, int* exit_code);
void add_kv_math_command(CLI::App& app, int* exit_code);
void add_trace_command(CLI::App& app, int* exit_code);
void add_break_command(CLI::App& app, int* exit_code);
void add_batch_command(CLI::App& app, int* exit_code);
void add_serve_command(CLI::App& app, int* exit_code);
void add_quantize_commands(CLI::App& app, int* exit_code);
void add_perplexity_command(CLI::App& app, int* exit_code);
void add_passkey_command(CLI::App& app, int* exit_code);

}  // namespace cachet::cli
