// cachet template: render a chat template over a conversation given as JSON (what `chat` sends the model).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "chat/chat_template.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

namespace {

Result<std::string> slurp(const std::string& path) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return io_error("cannot read " + path);
    ss << in.rdbuf();
  }
  return ss.str();
}

}  // namespace

void add_template_command(CLI::App& app, int* exit_code) {
  struct Args {
    std::string model, template_file, messages, tools, bos, eos;
    bool no_generation_prompt = false, bos_set = false, eos_set = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("template", "render the chat template over a conversation (JSON)");
  c->add_option("-m,--model", a->model, "GGUF file whose tokenizer.chat_template to use (default model)");
  c->add_option("--template", a->template_file, "a Jinja template file instead of the model's");
  c->add_option("--messages", a->messages, "JSON file with the messages array ('-' for stdin)")->required();
  c->add_option("--tools", a->tools, "JSON file with a tools array");
  c->add_option("--bos", a->bos, "bos_token (default: the model's)");
  c->add_option("--eos", a->eos, "eos_token (default: the model's)");
  c->add_flag("--no-generation-prompt", a->no_generation_prompt, "do not open an assistant turn at the end");
  c->callback([a, c, exit_code] {
    ChatTemplateInputs in;
    std::string source;
    if (!a->template_file.empty()) {
      auto t = slurp(a->template_file);
      if (!t.is_ok()) {
        *exit_code = fail(t.status());
        return;
      }
      source = *t;
    }
    if (source.empty() || c->count("--bos") == 0 || c->count("--eos") == 0) {
      auto f = GgufFile::open(resolve_model_path(a->model));
      if (!f.is_ok()) {
        *exit_code = fail(f.status());
        return;
      }
      if (source.empty()) {
        auto t = (*f)->get_string("tokenizer.chat_template");
        if (!t.is_ok()) {
          *exit_code = fail(t.status());
          return;
        }
        source = *t;
      }
      auto tok = Tokenizer::from_gguf(**f);
      if (tok.is_ok()) {
        if ((*tok)->bos()) in.bos_token = (*tok)->token_text(*(*tok)->bos());
        if ((*tok)->eos()) in.eos_token = (*tok)->token_text(*(*tok)->eos());
      }
    }
    if (c->count("--bos")) in.bos_token = a->bos;
    if (c->count("--eos")) in.eos_token = a->eos;
    auto msgs = slurp(a->messages);
    if (!msgs.is_ok()) {
      *exit_code = fail(msgs.status());
      return;
    }
    in.messages = nlohmann::ordered_json::parse(*msgs, nullptr, false);
    if (in.messages.is_discarded() || !in.messages.is_array()) {
      *exit_code = fail(invalid_argument("--messages must hold a JSON array"));
      return;
    }
    if (!a->tools.empty()) {
      auto tools = slurp(a->tools);
      if (!tools.is_ok()) {
        *exit_code = fail(tools.status());
        return;
      }
      in.tools = nlohmann::ordered_json::parse(*tools, nullptr, false);
    }
    in.add_generation_prompt = !a->no_generation_prompt;
    auto out = render_chat_template(source, in);
    if (!out.is_ok()) {
      *exit_code = fail(out.status());
      return;
    }
    std::fwrite(out->data(), 1, out->size(), stdout);
    *exit_code = 0;
  });
}

}  // namespace cachet::cli
