// Chat templates: the model's `tokenizer.chat_template` rendered over a conversation, with the variables
// HF's apply_chat_template passes (messages, add_generation_prompt, bos_token, eos_token, tools).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "cachet/status.h"
#include "chat/jinja.h"

namespace cachet {

class Tokenizer;

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{"role": ..., "content": ...}, ...]
  nlohmann::ordered_json tools;                                // null when none
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  // More variables (chat_template_kwargs: enable_thinking, reasoning_effort, ...); they never replace the above.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

// JSON -> template value (objects keep their key order).
jinja::Value json_to_value(const nlohmann::ordered_json& j);

Result<std::string> render_chat_template(const std::string& source, const ChatTemplateInputs& in);

}  // namespace cachet
