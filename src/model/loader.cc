#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "base/mmap_file.h"
#include "io/gguf.h"
#include "io/llama2c.h"
#include "kernels/kernels.h"
#include "model/model.h"

namespace cachet {

void register_llama_arch();
void register_qwen2_arch();
void register_qwen3_arch();
void register_qwen35_arch();
void register_lfm2_arch();
void register_granite_arch();
void register_nemotron_h_arch();
void register_gemma2_arch();
void register_gemma3_arch();
void register_gemma4_arch();
void register_gemma_embedding_arch();
void register_bert_archs();
void register_phi3_arch();
void register_gpt_oss_arch();
void register_smollm3_arch();
void register_mistral3_arch();
void register_deepseek2_arch();

namespace {

std::map<std::string, ArchFactory>& registry() {
  static std::map<std::string, ArchFactory> r;
  return r;
}

void register_builtin_archs() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_llama_arch();
    register_qwen2_arch();
    register_qwen3_arch();
    register_qwen35_arch();
    register_lfm2_arch();
    register_granite_arch();
    register_nemotron_h_arch();
    register_gemma2_arch();
    register_gemma3_arch();
    register_gemma4_arch();
    register_gemma_embedding_arch();
    register_bert_archs();
    register_phi3_arch();
    register_gpt_oss_arch();
    register_smollm3_arch();
    register_mistral3_arch();
    register_deepseek2_arch();
  });
}

}  // namespace

bool register_arch(const std::string& name, ArchFactory factory) {
  return registry().emplace(name, std::move(factory)).second;
}

Result<std::unique_ptr<Model>> load_model(const std::string& path, const LoadOptions& opts) {
  register_builtin_archs();
  CACHET_RETURN_IF_ERROR(kernel_choice());
  int n_threads = opts.n_threads > 0 ? opts.n_threads : static_cast<int>(std::thread::hardware_concurrency());
  auto pool = opts.pool ? opts.pool : std::make_shared<ThreadPool>(std::max(1, n_threads));
  {
    CACHET_ASSIGN_OR_RETURN(MappedFile probe, MappedFile::open(path));
    bool gguf_magic = probe.size() >= 4 && std::memcmp(probe.data(), "GGUF", 4) == 0;
    if (!gguf_magic && looks_like_llama2c(probe.data(), probe.size())) {
      auto m = load_llama2c(path, pool, opts);
      if (m.is_ok()) (*m)->set_shared_pool(pool);
      return m;
    }
  }
  CACHET_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::open(path));
  CACHET_ASSIGN_OR_RETURN(std::string arch, f->get_string("general.architecture"));
  auto it = registry().find(arch);
  if (it == registry().end()) return unimplemented(path + ": architecture '" + arch + "' is not supported");
  auto m = it->second(std::move(f), pool, opts);
  if (!m.is_ok()) return m.status().with_context(path);
  (*m)->set_shared_pool(pool);
  return m;
}

}  // namespace cachet
