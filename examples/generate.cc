// generate MODEL PROMPT [N]: streams N greedy tokens' text to stdout, then their ids to stderr.
#include <cachet/cachet.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 3) return std::fprintf(stderr, "usage: generate MODEL PROMPT [N]\n"), 2;
  auto llm = cachet::LLM::load(argv[1]);
  if (!llm.is_ok()) return std::fprintf(stderr, "error: %s\n", llm.status().message().c_str()), 1;
  cachet::Request r;
  r.prompt = argv[2];
  r.params.max_tokens = argc > 3 ? std::atoi(argv[3]) : 32;
  auto out = (*llm)->generate(r, [](const cachet::OutputEvent& e) {
    std::fputs(e.text.c_str(), stdout);
    std::fflush(stdout);
    return true;
  });
  if (!out.is_ok()) return std::fprintf(stderr, "error: %s\n", out.status().message().c_str()), 1;
  std::fprintf(stderr, "\nids:");
  for (int id : out->token_ids) std::fprintf(stderr, " %d", id);
  std::fprintf(stderr, "\nfinish: %s\n", cachet::finish_reason_name(out->finish));
}
