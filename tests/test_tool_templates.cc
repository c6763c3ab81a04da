// Each tool-calling family's official chat template (llama.cpp's models/templates, unpacked by
// scripts/setup_oracles.sh) writes a past assistant turn with two calls. What it writes after the generation prompt
// is what the model was trained to produce, so: the family is detected from the template, the parser reads that
// text back into the same two calls (names and arguments equal as JSON, no content), and the grammar cachet puts
// on a required call admits that text token by token (GPT-2's vocabulary) and may end where it ends.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "chat/tool_format.h"
#include "grammar/grammar.h"
#include "io/gguf.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

namespace cachet {
namespace {

using ojson = nlohmann::ordered_json;

std::string templates_dir() {
  const char* src = std::getenv("CACHET_LLAMACPP_SRC");
  const std::string root =
      src ? std::string(src) : std::string(std::getenv("HOME")) + "/.cache/cachet/llama.cpp/src-0.3.36";
  return root + "/vendor/llama.cpp/models/templates/";
}

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
      "q": {"type": "string"}}, "required": ["q"]}}}])");

struct Family {
  const char* file;
  ToolSyntax syntax;
  const char* end_of_turn;  // what the template writes after the calls ("" : nothing)
  const char* id0;          // ids as the family's templates want them
  const char* id1;
};

const Family kFamilies[] = {
    {"Qwen-Qwen3-0.6B", ToolSyntax::kHermes, "<|im_end|>", "call_0", "call_1"},
    {"Qwen3.5-4B", ToolSyntax::kQwenXml, "<|im_end|>", "call_0", "call_1"},
    {"deepseek-ai-DeepSeek-V3.1", ToolSyntax::kDeepSeekV31, "<｜end▁of▁sentence｜>", "call_0", "call_1"},
    {"GLM-4.6", ToolSyntax::kGlm, "", "call_0", "call_1"},
    {"GLM-4.7-Flash", ToolSyntax::kGlm, "", "call_0", "call_1"},
    {"moonshotai-Kimi-K2", ToolSyntax::kKimi, "<|im_end|>", "functions.get_weather:0", "functions.search:1"},
    {"Kimi-K2-Thinking", ToolSyntax::kKimi, "<|im_end|>", "functions.get_weather:0", "functions.search:1"},
    {"NVIDIA-Nemotron-Nano-v2", ToolSyntax::kNemotron, "<SPECIAL_12>", "call_0", "call_1"},
    {"unsloth-mistral-Devstral-Small-2507", ToolSyntax::kMistralArgs, "</s>", "a1B2c3D4e", "f5G6h7J8k"},
    {"mistralai-Ministral-3-14B-Reasoning-2512", ToolSyntax::kMistralArgs, "</s>", "a1B2c3D4e", "f5G6h7J8k"},
    {"Mistral-Small-3.2-24B-Instruct-2506", ToolSyntax::kMistralArgs, "</s>", "a1B2c3D4e", "f5G6h7J8k"},
    {"deepseek-ai-DeepSeek-V3.2", ToolSyntax::kDsml, "<｜end▁of▁sentence｜>", "call_0", "call_1"},
    {"deepseek-ai-DeepSeek-V4", ToolSyntax::kDsmlV4, "<｜end▁of▁sentence｜>", "call_0", "call_1"},
    {"LFM2-8B-A1B", ToolSyntax::kPythonic, "<|im_end|>", "call_0", "call_1"},  // past calls: ours, in the content
    {"LFM2.5-8B-A1B", ToolSyntax::kPythonic, "<|im_end|>", "call_0", "call_1"},
};

TEST(ToolTemplates, EachFamilysOwnRenderingParsesBackAndFitsItsGrammar) {
  auto vocab = GgufFile::open(testing::shared_dir() + "/vocab/ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(vocab.is_ok());
  auto tok = Tokenizer::from_gguf(**vocab);
  ASSERT_TRUE(tok.is_ok());
  GrammarCompiler gc(**tok, {50256}, (*tok)->n_vocab());
  std::vector<ToolSpec> specs;
  for (const ojson& t : kTools) specs.push_back({t["function"]["name"], t["function"]["parameters"]});
  for (const Family& fam : kFamilies) {
    SCOPED_TRACE(fam.file);
    std::ifstream in(templates_dir() + fam.file + ".jinja");
    ASSERT_TRUE(in.good()) << templates_dir() << fam.file << " (bash scripts/setup_oracles.sh unpacks it)";
    const std::string src((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const ChatFormat f = detect_chat_format(src);
    EXPECT_EQ(tool_syntax_name(f.tools), std::string(tool_syntax_name(fam.syntax)));
    const ojson calls = {
        {{"id", fam.id0}, {"type", "function"},
         {"function", {{"name", "get_weather"}, {"arguments", {{"city", "New York"}, {"days", 3}}}}}},
        {{"id", fam.id1}, {"type", "function"}, {"function", {{"name", "search"}, {"arguments", {{"q", "x"}}}}}}};
    ChatTemplateInputs ti;
    ti.tools = kTools;
    ti.bos_token = "<s>";
    ti.eos_token = "</s>";
    ti.kwargs["enable_thinking"] = false;
    ti.messages = ojson::array({{{"role", "user"}, {"content", "Weather in New York?"}}});
    auto prompt = render_chat_template(src, ti);
    ASSERT_TRUE(prompt.is_ok()) << prompt.status().message();
    ti.messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}});
    if (f.calls_in_content) ti.messages = calls_into_content(ti.messages, f);
    ti.add_generation_prompt = false;
    auto whole = render_chat_template(src, ti);
    ASSERT_TRUE(whole.is_ok()) << whole.status().message();
    // The reply starts where the two renderings part (Nemotron Nano 2's generation prompt opens a thought that
    // its past turns do not write).
    size_t common = 0;
    while (common < prompt->size() && common < whole->size() && (*prompt)[common] == (*whole)[common]) ++common;
    if (common < prompt->size())
      while (common > 0 && (*whole)[common - 1] != '\n' && (*whole)[common - 1] != '>') --common;
    ASSERT_GE(common + 16, prompt->size()) << *prompt << "\n---\n" << *whole;
    std::string text = whole->substr(common);
    // DeepSeek V3.2 / V4 with thinking off: the generation prompt closes an empty thought (<think></think>) and a
    // past turn writes only its end; the reply starts after it.
    const std::string& te = f.think_end;
    if (!te.empty() && text.rfind(te, 0) == 0 && prompt->size() >= te.size() &&
        prompt->compare(prompt->size() - te.size(), te.size(), te) == 0)
      text = text.substr(te.size());
    if (*fam.end_of_turn) {
      const size_t eot = text.rfind(fam.end_of_turn);
      ASSERT_NE(eot, std::string::npos) << text;
      text.resize(eot);
    }
    // The reply as the model writes it: parsed back into the same calls, nothing left as content.
    ChatOutputParser p(f, !f.think_start.empty(), false, specs, "call_");
    OutputDelta d = p.push(text);
    d.append(p.finish());
    EXPECT_EQ(d.content, "") << text;
    std::vector<std::pair<std::string, std::string>> got;  // name, arguments
    for (const ToolCallDelta& c : d.calls) {
      if (!c.name.empty()) got.emplace_back(c.name, "");
      if (!got.empty()) got.back().second += c.arguments;
    }
    ASSERT_EQ(got.size(), 2u) << text;
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(got[k].first, calls[k]["function"]["name"]);
      EXPECT_EQ(ojson::parse(got[k].second), calls[k]["function"]["arguments"]) << got[k].second;
    }
    // The grammar of a required call (after an optional thought) admits it (the layout before the first call is
    // the model's to skip).
    OutputShape sh;
    sh.format = f;
    sh.reasoning = !f.think_start.empty();
    sh.tools = specs;
    sh.choice = ToolChoice::kRequired;
    auto g = gc.structural_tag(*structural_tag_for(sh));
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    const size_t start = text.find_first_not_of(" \n");
    auto m = (*g)->matcher();
    std::string walked;
    bool all = true;
    for (int32_t id : (*tok)->encode(text.substr(start), false, false)) {
      if (!m->accept(id)) {
        all = false;
        break;
      }
      walked += (*tok)->decode({id});
    }
    EXPECT_TRUE(all) << "refused after: " << walked << "\nof: " << text;
    EXPECT_TRUE(all && m->completed()) << text;
  }
}

// The XML families write a string parameter between tags with whitespace around it. A length bound must hold for
// the value the call returns: every text the required-call grammar admits parses to a city of 2..8 characters,
// the longest fits, one more does not (before, whitespace inside the bound came back as part of the value).
TEST(ToolTemplates, XmlFamiliesBoundStringsAsTheCallReturnsThem) {
  auto vocab = GgufFile::open(testing::shared_dir() + "/vocab/ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(vocab.is_ok());
  auto tok = Tokenizer::from_gguf(**vocab);
  ASSERT_TRUE(tok.is_ok());
  GrammarCompiler gc(**tok, {50256}, (*tok)->n_vocab());
  const std::vector<ToolSpec> specs = {{"get_weather", ojson::parse(R"({"type": "object", "properties": {
      "city": {"type": "string", "minLength": 2, "maxLength": 8}}, "required": ["city"]})")}};
  struct Case {
    const char* file;
    std::string before, after;  // around the value
  };
  const Case cases[] = {
      {"Qwen3.5-4B", "<tool_call>\n<function=get_weather>\n<parameter=city>\n",
       "\n</parameter>\n</function>\n</tool_call>"},
      {"GLM-4.7-Flash", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>", "</arg_value></tool_call>"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    std::ifstream in(templates_dir() + c.file + ".jinja");
    ASSERT_TRUE(in.good()) << templates_dir() << c.file;
    const ChatFormat f = detect_chat_format(std::string(std::istreambuf_iterator<char>(in), {}));
    OutputShape sh;
    sh.format = f;
    sh.tools = specs;
    sh.choice = ToolChoice::kRequired;
    auto g = gc.structural_tag(*structural_tag_for(sh));
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    auto admits = [&](const std::string& text) {
      auto m = (*g)->matcher();
      for (int32_t id : (*tok)->encode(text, false, false))
        if (!m->accept(id)) return false;
      return m->completed();
    };
    int admitted = 0;
    for (const std::string v : {"Amsterdam", "New York", "Oslo", "Oslo\n  ", "  Oslo", "Lisbon\n \n", " a ", "a",
                                "ab", "Rome \n\t", "\n\nParis\n\n", "Paris is nice"}) {
      const std::string text = c.before + v + c.after;
      if (!admits(text)) continue;
      ++admitted;
      ChatOutputParser p(f, false, false, specs, "call_");
      OutputDelta d = p.push(text);
      d.append(p.finish());
      std::string args;
      for (const ToolCallDelta& call : d.calls) args += call.arguments;
      const std::string city = ojson::parse(args).value("city", "");
      EXPECT_GE(city.size(), 2u) << "admitted " << ojson(v).dump() << " as " << args;
      EXPECT_LE(city.size(), 8u) << "admitted " << ojson(v).dump() << " as " << args;
    }
    EXPECT_TRUE(admits(c.before + "New York" + c.after));
    EXPECT_FALSE(admits(c.before + "Amsterdam" + c.after));
    EXPECT_GE(admitted, 5);
  }
}

// LFM2's Python-style calls: keyword arguments valid against the schema, required ones first, optional ones in
// the schema's order, any of them first when none is required; LFM2.5's single quotes and True / False too.
TEST(ToolTemplates, PythonicCallsFollowTheSchema) {
  auto vocab = GgufFile::open(testing::shared_dir() + "/vocab/ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(vocab.is_ok());
  auto tok = Tokenizer::from_gguf(**vocab);
  ASSERT_TRUE(tok.is_ok());
  GrammarCompiler gc(**tok, {50256}, (*tok)->n_vocab());
  OutputShape sh;
  sh.format = detect_chat_format("List of tools: <|tool_list_start|>[{{ tools }}]<|tool_list_end|>");
  ASSERT_EQ(sh.format.tools, ToolSyntax::kPythonic);
  sh.tools = {{"get_weather", ojson::parse(R"({"type": "object", "properties": {"city": {"type": "string"},
                  "days": {"type": "integer", "minimum": 1}, "unit": {"enum": ["c", "f"]},
                  "exact": {"type": "boolean"}}})")},
              {"book", ojson::parse(R"({"type": "object", "properties": {"when": {"$ref": "#/$defs/t"},
                  "who": {"type": "string", "maxLength": 4}}, "required": ["who"],
                  "$defs": {"t": {"type": "string", "enum": ["am", "pm"]}}})")}};
  sh.choice = ToolChoice::kRequired;
  auto g = gc.structural_tag(*structural_tag_for(sh));
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  auto admits = [&](const std::string& calls) {
    auto m = (*g)->matcher();
    for (int32_t id : (*tok)->encode("<|tool_call_start|>[" + calls + "]<|tool_call_end|>", false, false))
      if (!m->accept(id)) return false;
    return m->completed();
  };
  for (const char* ok : {"get_weather()", "get_weather(days=2, unit=\"c\")", "get_weather(unit=\"f\")",
                         "get_weather(city='Oslo', exact=True)", "get_weather(city=\"Oslo\", exact=false)",
                         "book(who=\"Ann\")", "book(who=\"Ann\", when=\"pm\")", "get_weather(), book(who=\"Bo\")"})
    EXPECT_TRUE(admits(ok)) << ok;
  for (const char* bad : {"get_weather(unit=\"x\")", "get_weather(days=0)", "get_weather(days=\"2\")",
                          "get_weather(unit=\"c\", days=2)", "book()", "book(when=\"pm\", who=\"Ann\")",
                          "book(who=\"Annie\")", "book(who='Annie')", "book(who=\"A\", when=\"noon\")", "nope()",
                          "get_weather(exact=Yes)"})
    EXPECT_FALSE(admits(bad)) << bad;
}

}  // namespace
}  // namespace cachet
