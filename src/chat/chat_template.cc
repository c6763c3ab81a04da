#include "chat/chat_template.h"

namespace cachet {

jinja::Value json_to_value(const nlohmann::ordered_json& j) {
  using jinja::Value;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      jinja::List l;
      for (const auto& x : j) l.push_back(json_to_value(x));
      return Value(l);
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), json_to_value(it.value()));
      return Value(d);
    }
    default: return Value();
  }
}

Result<std::string> render_chat_template(const std::string& source, const ChatTemplateInputs& in) {
  CACHET_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::parse(source));
  jinja::Dict ctx;
  for (auto it = in.kwargs.begin(); it != in.kwargs.end(); ++it) ctx.set(it.key(), json_to_value(it.value()));
  ctx.set("messages", json_to_value(in.messages));
  ctx.set("add_generation_prompt", jinja::Value(in.add_generation_prompt));
  ctx.set("bos_token", jinja::Value(in.bos_token));
  ctx.set("eos_token", jinja::Value(in.eos_token));
  if (!in.tools.is_null()) ctx.set("tools", json_to_value(in.tools));
  return t.render(ctx);
}

}  // namespace cachet
