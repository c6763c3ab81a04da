// The Jinja parser and renderer on arbitrary templates, with a conversation in the context: parse errors,
// render errors and the sandbox limits are fine; a crash, a leak or undefined behaviour is a finding.
#include <cstdint>
#include <string>

#include "chat/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachet::jinja;
  auto t = Template::parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!t.is_ok()) return 0;
  List messages;
  for (const char* role : {"system", "user", "assistant", "user"}) {
    Dict m;
    m.set("role", Value(role));
    m.set("content", Value(std::string("some text from ") + role));
    messages.push_back(Value(m));
  }
  Dict ctx;
  ctx.set("messages", Value(messages));
  ctx.set("add_generation_prompt", Value(true));
  ctx.set("bos_token", Value("<s>"));
  ctx.set("eos_token", Value("</s>"));
  (void)t->render(ctx);
  return 0;
}
