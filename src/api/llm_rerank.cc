// LLM::rerank: each (query, document) pair as the reranker's file formats it, scored by rank pooling (the
// model's classifier head on the state its file names), batched in the engine like any embedding request.
#include "api/llm_impl.h"
#include "io/gguf.h"

namespace cachet {

namespace {

void replace_all(std::string* s, const std::string& from, const std::string& to) {
  for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + to.size())) s->replace(at, from.size(), to);
}

}  // namespace

Result<std::vector<int32_t>> LLM::rerank_tokens(const std::string& query, const std::string& document) const {
  const Tokenizer* tok = impl_->tok.get();
  if (!tok) return invalid_argument("reranking text needs the model's tokenizer");
  const GgufFile* f = impl_->model->gguf();
  if (f && f->find("tokenizer.chat_template.rerank")) {
    // Filled in, then tokenized as one text (as llama.cpp does): tokenizing the parts apart would split a BPE
    // word from the space before it. Special tokens the query or document spell are parsed too: they change
    // only that pair's own score.
    CACHET_ASSIGN_OR_RETURN(std::string prompt, f->get_string("tokenizer.chat_template.rerank"));
    replace_all(&prompt, "{query}", query);
    replace_all(&prompt, "{document}", document);
    return tok->encode(prompt, /*add_special=*/false, /*parse_special=*/true);
  }
  std::vector<int32_t> out;
  const std::optional<int32_t> eos = tok->eos() ? tok->eos() : tok->sep();
  if (tok->add_bos() && tok->bos()) out.push_back(*tok->bos());
  const std::vector<int32_t> q = tok->encode(query, false, false), d = tok->encode(document, false, false);
  out.insert(out.end(), q.begin(), q.end());
  if (tok->add_eos() && eos) out.push_back(*eos);
  if (tok->add_sep() && tok->sep()) out.push_back(*tok->sep());
  out.insert(out.end(), d.begin(), d.end());
  if (tok->add_eos() && eos) out.push_back(*eos);
  return out;
}

Result<std::vector<float>> LLM::rerank(const std::string& query, const std::vector<std::string>& documents,
                                       const RerankParams& params) {
  if (query.empty()) return invalid_argument("the query is empty");
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(documents.size());
  for (size_t i = 0; i < documents.size(); ++i) {
    if (documents[i].empty()) return invalid_argument("document " + std::to_string(i) + " is empty");
    CACHET_ASSIGN_OR_RETURN(std::vector<int32_t> t, rerank_tokens(query, documents[i]));
    ids.push_back(std::move(t));
  }
  EmbedParams p;
  p.pooling = Pooling::kRank;
  p.normalize = false;
  p.cache_namespace = params.cache_namespace;
  CACHET_ASSIGN_OR_RETURN(std::vector<std::vector<float>> out, embed(ids, p));
  std::vector<float> scores;
  scores.reserve(out.size());
  for (const std::vector<float>& v : out) scores.push_back(v.at(0));
  return scores;
}

}  // namespace cachet
