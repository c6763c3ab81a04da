// A Jinja template interpreter for chat templates (`tokenizer.chat_template`), written for what real
// templates use: for/if/elif/else, set (also on namespaces and as a block), macros, loop variables,
// break/continue, filters, tests, string and dict methods, raise_exception. Rendering follows Python
// jinja2 as the HF chat environment configures it (trim_blocks, lstrip_blocks). Anything else is a parse or
// render error that names the construct.
#pragma once

#include <memory>
#include <string>

#include "cachet/status.h"
#include "chat/jinja_limits.h"
#include "chat/jinja_value.h"

namespace cachet::jinja {

struct Node;

class Template {
 public:
  static Result<Template> parse(const std::string& source);
  // Renders with the given variables; `stats`, when given, receives what the render cost (also on an error).
  Result<std::string> render(const Dict& context, RenderStats* stats = nullptr) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace cachet::jinja
