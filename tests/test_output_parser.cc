// Each family's output as models write it (recorded shapes), split into reasoning, answer and tool calls; the
// same text fed whole, byte by byte and in random pieces gives the same result (streamed deltas assemble to
// exactly the non-streamed answer); markup never reaches the content; calls inside reasoning are kept.
#include <gtest/gtest.h>

#include <random>

#include <cstdlib>
#include <fstream>
#include <filesystem>

#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "chat/python_literal.h"
#include "io/gguf.h"
#include "chat/tool_format.h"

namespace cachet {
namespace {

struct Parsed {
  std::string reasoning, content;
  std::vector<std::tuple<std::string, std::string, std::string>> calls;  // id, name, arguments
  bool operator==(const Parsed& o) const {
    return reasoning == o.reasoning && content == o.content && calls == o.calls;
  }
};

Parsed feed(const ChatFormat& f, bool reasoning, bool open, const std::vector<ToolSpec>& tools,
            const std::vector<std::string>& pieces) {
  ChatOutputParser p(f, reasoning, open, tools, "call_");
  OutputDelta all;
  for (const std::string& s : pieces) all.append(p.push(s));
  all.append(p.finish());
  Parsed r{all.reasoning, all.content, {}};
  for (const ToolCallDelta& d : all.calls) {
    if (!d.id.empty()) {
      EXPECT_EQ(d.index, static_cast<int>(r.calls.size()));
      r.calls.emplace_back(d.id, d.name, "");
    }
    EXPECT_LT(d.index, static_cast<int>(r.calls.size()));
    if (d.index < static_cast<int>(r.calls.size())) std::get<2>(r.calls[d.index]) += d.arguments;
  }
  return r;
}

void PrintTo(const Parsed& p, std::ostream* os) {
  *os << "reasoning=" << ::testing::PrintToString(p.reasoning) << " content=" << ::testing::PrintToString(p.content);
  for (const auto& [id, name, args] : p.calls) *os << " call(" << id << "," << name << "," << args << ")";
}

// Whole, byte by byte, and in 20 random splits: all the same.
Parsed parse_every_way(const ChatFormat& f, bool reasoning, bool open, const std::vector<ToolSpec>& tools,
                       const std::string& text) {
  const Parsed whole = feed(f, reasoning, open, tools, {text});
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  EXPECT_EQ(feed(f, reasoning, open, tools, bytes), whole) << "byte by byte";
  std::mt19937 rng(1);
  for (int k = 0; k < 20; ++k) {
    std::vector<std::string> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t n = 1 + rng() % 9;
      pieces.push_back(text.substr(at, n));
      at += n;
    }
    EXPECT_EQ(feed(f, reasoning, open, tools, pieces), whole) << "split " << k;
  }
  return whole;
}

ChatFormat fmt(ToolSyntax s, bool think = true) {
  ChatFormat f;
  f.tools = s;
  if (think) f.think_start = "<think>", f.think_end = "</think>";
  return f;
}

const std::vector<ToolSpec> kTools = {
    {"get_weather", nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"city": {"type": "string"},
        "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]}}})")},
    {"search", nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"q": {"type": "string"}}})")}};

TEST(OutputParser, HermesWithReasoningTextAndTwoCalls) {
  const Parsed p = parse_every_way(
      fmt(ToolSyntax::kHermes), true, false, kTools,
      "<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", "
      "\"arguments\": {\"q\": \"a } brace \\\" and <tool_call></tool_call> inside\"}}\n</tool_call>");
  EXPECT_EQ(p.reasoning, "\nThe user wants weather.\n");
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0], std::make_tuple(std::string("call_0"), std::string("get_weather"),
                                        std::string(R"({"city": "Paris", "days": 3})")));
  EXPECT_EQ(std::get<1>(p.calls[1]), "search");
  EXPECT_EQ(std::get<2>(p.calls[1]), R"({"q": "a } brace \" and <tool_call></tool_call> inside"})");
}

TEST(OutputParser, ACallInsideReasoningIsNotLost) {
  const Parsed p = parse_every_way(
      fmt(ToolSyntax::kHermes), true, true, kTools,
      "I should look it up.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>\n"
      "</think>\nDone.");
  EXPECT_EQ(p.reasoning, "I should look it up.\n\n");
  EXPECT_EQ(p.content, "Done.");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(std::get<2>(p.calls[0]), R"({"q": "x"})");
}

TEST(OutputParser, WithoutToolsOrReasoningTheMarkupIsText) {
  const std::string text = "<think>a</think>b <tool_call>{\"name\": \"search\"}</tool_call>";
  EXPECT_EQ(parse_every_way(fmt(ToolSyntax::kHermes), false, false, {}, text).content, text);
  // A held-back marker prefix that never completes comes out at the end.
  EXPECT_EQ(parse_every_way(fmt(ToolSyntax::kHermes), true, false, kTools, "x <tool_ca").content, "x <tool_ca");
  {  // ... unless the text was cut short while writing it (max_tokens)
    ChatOutputParser p(fmt(ToolSyntax::kHermes), false, false, kTools, "c");
    OutputDelta d = p.push("x <tool_ca");
    d.append(p.finish(/*cut=*/true));
    EXPECT_EQ(d.content, "x");
  }
  // A call cut short before its name (max_tokens) is dropped, never shown as content; after its name it is a
  // call with the arguments it got.
  Parsed cut = parse_every_way(fmt(ToolSyntax::kHermes), true, false, kTools, "Hi.\n<tool_call>\n{\"name\": \"sea");
  EXPECT_EQ(cut.content, "Hi.");
  EXPECT_TRUE(cut.calls.empty());
  cut = parse_every_way(fmt(ToolSyntax::kHermes), true, false, kTools,
                        "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"ab");
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(std::get<2>(cut.calls[0]), "{\"q\": \"ab");
}

TEST(OutputParser, QwenXmlParametersTypedBySchema) {
  const Parsed p = parse_every_way(fmt(ToolSyntax::kQwenXml), true, true, kTools,
                                   "ok\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew </tool_call></function> York\n"
                                   "</parameter>\n<parameter=days>\n 5 \n</parameter>\n<parameter=unit>\n\nc\n</parameter>\n</function>\n</tool_call>");
  EXPECT_EQ(p.reasoning, "ok\n");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(std::get<1>(p.calls[0]), "get_weather");
  EXPECT_EQ(std::get<2>(p.calls[0]), R"({"city": "New </tool_call></function> York", "days": 5, "unit": "c"})");
}

TEST(OutputParser, Llama3BareJsonAndPythonTag) {
  Parsed p = parse_every_way(fmt(ToolSyntax::kLlama3, false), false, false, kTools,
                             "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(std::get<2>(p.calls[0]), R"({"city": "Oslo"})");
  EXPECT_EQ(p.content, "");
  p = parse_every_way(fmt(ToolSyntax::kLlama3, false), false, false, kTools,
                      "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"y\"}}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(std::get<1>(p.calls[0]), "search");
  // JSON after prose is prose.
  p = parse_every_way(fmt(ToolSyntax::kLlama3, false), false, false, kTools, "Here: {\"name\": \"x\"}");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "Here: {\"name\": \"x\"}");
}

TEST(OutputParser, MistralArrayOfCalls) {
  const Parsed p = parse_every_way(fmt(ToolSyntax::kMistral, false), false, false, kTools,
                                   "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}, {\"name\": "
                                   "\"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 1}}]");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(std::get<2>(p.calls[0]), R"({"q": "a"})");
  EXPECT_EQ(std::get<2>(p.calls[1]), R"({"city": "Rome", "days": 1})");
  EXPECT_EQ(p.content, "");
}

TEST(OutputParser, DeepSeekCalls) {
  const Parsed p = parse_every_way(
      fmt(ToolSyntax::kDeepSeek), true, true, kTools,
      "hmm</think>Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{\"q\": "
      "\"z\"}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": "
      "\"Lima\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  EXPECT_EQ(p.reasoning, "hmm");
  EXPECT_EQ(p.content, "Sure.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(std::get<1>(p.calls[1]), "get_weather");
  EXPECT_EQ(std::get<2>(p.calls[1]), R"({"city": "Lima"})");
}

// DeepSeek V3.1: the name, then the bare JSON, in the one section; arguments stream before the call closes.
TEST(OutputParser, DeepSeekV31Calls) {
  const Parsed p = parse_every_way(
      fmt(ToolSyntax::kDeepSeekV31), true, true, kTools,
      "hmm</think>Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": \"<｜tool▁call▁end｜>?\"}"
      "<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Lima\"}<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>");
  EXPECT_EQ(p.reasoning, "hmm");
  EXPECT_EQ(p.content, "Sure.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(std::get<1>(p.calls[0]), "search");
  EXPECT_EQ(std::get<2>(p.calls[1]), R"({"city": "Lima"})");
  ChatOutputParser s(fmt(ToolSyntax::kDeepSeekV31), false, false, kTools, "c");
  OutputDelta d = s.push("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": \"lo");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "search");
  EXPECT_EQ(d.calls[0].arguments, "{\"q\": \"lo");
}

// GLM-4.5 / 4.6 (newlines between) and 4.7 (none): string values as written, the rest JSON, typed by the schema;
// a value may spell </tool_call>.
TEST(OutputParser, GlmKeyValueCalls) {
  const ChatFormat f = fmt(ToolSyntax::kGlm);
  Parsed p = parse_every_way(f, true, true, kTools,
                             "plan</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>New York"
                             "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n"
                             "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>a</tool_call> b</arg_value>\n"
                             "</tool_call>");
  EXPECT_EQ(p.reasoning, "plan");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(std::get<2>(p.calls[0]), R"({"city": "New York", "days": 3})");
  EXPECT_EQ(std::get<2>(p.calls[1]), R"({"q": "a</tool_call> b"})");
  p = parse_every_way(f, false, false, kTools,
                      "Checking.<tool_call>get_weather<arg_key>days</arg_key><arg_value>2</arg_value><arg_key>unit"
                      "</arg_key><arg_value>c</arg_value></tool_call><tool_call>search</tool_call>");
  EXPECT_EQ(p.content, "Checking.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(std::get<2>(p.calls[0]), R"({"days": 2, "unit": "c"})");
  EXPECT_EQ(std::get<1>(p.calls[1]), "search");
  EXPECT_EQ(std::get<2>(p.calls[1]), "{}");
}

// Kimi K2: the model numbers its calls (functions.NAME:N), and that id is the call's (the template renders the
// result by it); an id written twice falls back to ours.
TEST(OutputParser, KimiSectionWithTheModelsIds) {
  const Parsed p = parse_every_way(
      fmt(ToolSyntax::kKimi), true, false, kTools,
      "<think>look it up</think>One moment.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\": \"Oslo\"}<|tool_call_end|><|tool_call_begin|>functions.search:0"
      "<|tool_call_argument_begin|>{\"q\": \"b\"}<|tool_call_end|><|tool_call_begin|>functions.search:0"
      "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>");
  EXPECT_EQ(p.reasoning, "look it up");
  EXPECT_EQ(p.content, "One moment.");
  ASSERT_EQ(p.calls.size(), 3u);
  EXPECT_EQ(p.calls[0], std::make_tuple(std::string("functions.get_weather:0"), std::string("get_weather"),
                                        std::string(R"({"city": "Oslo"})")));
  EXPECT_EQ(std::get<0>(p.calls[1]), "functions.search:0");
  EXPECT_EQ(std::get<1>(p.calls[2]), "search");
  EXPECT_EQ(std::get<0>(p.calls[2]), "call_2");
}

// Devstral / Magistral / Ministral 3 / Mistral Small 3.2: [TOOL_CALLS]NAME[ARGS]{...} per call, the model's own
// [CALL_ID] when it writes one, else a 9-character id (the only kind Mistral's templates take); [THINK] reasoning.
TEST(OutputParser, MistralArgsCalls) {
  ChatFormat f = fmt(ToolSyntax::kMistralArgs, false);
  f.think_start = "[THINK]", f.think_end = "[/THINK]";
  const Parsed p = parse_every_way(
      f, true, false, kTools,
      "[THINK]weather first[/THINK]Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\", \"days\": 1}"
      "[TOOL_CALLS]search[CALL_ID]a1B2c3D4e[ARGS]{\"q\": \"x}\"}");
  EXPECT_EQ(p.reasoning, "weather first");
  EXPECT_EQ(p.content, "Sure.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(std::get<1>(p.calls[0]), "get_weather");
  EXPECT_EQ(std::get<2>(p.calls[0]), R"({"city": "Rome", "days": 1})");
  const std::string& id = std::get<0>(p.calls[0]);
  EXPECT_EQ(id.size(), 9u);
  EXPECT_EQ(id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"), std::string::npos);
  EXPECT_EQ(std::get<0>(p.calls[1]), "a1B2c3D4e");
  EXPECT_EQ(std::get<2>(p.calls[1]), R"({"q": "x}"})");
}

// Nemotron Nano 2: a JSON array of calls between <TOOLCALL> and </TOOLCALL>.
TEST(OutputParser, NemotronToolcallArray) {
  const Parsed p = parse_every_way(fmt(ToolSyntax::kNemotron), true, false, kTools,
                                   "<think>two</think>Both.\n<TOOLCALL>[{\"name\": \"search\", \"arguments\": {\"q\": "
                                   "\"]</TOOLCALL>\"}}, {\"name\": \"get_weather\", \"arguments\": {\"days\": 2}}]"
                                   "</TOOLCALL>");
  EXPECT_EQ(p.reasoning, "two");
  EXPECT_EQ(p.content, "Both.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(std::get<2>(p.calls[0]), R"({"q": "]</TOOLCALL>"})");
  EXPECT_EQ(std::get<1>(p.calls[1]), "get_weather");
  EXPECT_EQ(std::get<2>(p.calls[1]), R"({"days": 2})");
}

// LFM2 / LFM2.5: a Python list of calls; strings in either quote with Python's escapes, Python's and JSON's
// literals, nested values, a string spelling the close marker, text before the calls.
TEST(OutputParser, PythonicCallList) {
  const Parsed p = parse_every_way(
      fmt(ToolSyntax::kPythonic), true, false, kTools,
      "<think>two</think>Looking.<|tool_call_start|>[get_weather(city='Rio \\'x\\' \\u00e9', days=-2.5e1, "
      "unit=\"c\"), search(q=\"]<|tool_call_end|>\"), get_weather(days=True), search(q=None, x=[1, {'a': (2, 3)}]), "
      "get_weather()]<|tool_call_end|>Done.");
  EXPECT_EQ(p.reasoning, "two");
  EXPECT_EQ(p.content, "Looking.Done.");
  ASSERT_EQ(p.calls.size(), 5u);
  EXPECT_EQ(std::get<1>(p.calls[0]), "get_weather");
  EXPECT_EQ(std::get<2>(p.calls[0]), "{\"city\": \"Rio 'x' \u00e9\", \"days\": -25.0, \"unit\": \"c\"}");
  EXPECT_EQ(std::get<2>(p.calls[1]), R"({"q": "]<|tool_call_end|>"})");
  EXPECT_EQ(std::get<2>(p.calls[2]), R"({"days": true})");
  EXPECT_EQ(std::get<2>(p.calls[3]), R"({"q": null, "x": [1,{"a":[2,3]}]})");
  EXPECT_EQ(std::get<2>(p.calls[4]), "{}");
  // Cut short inside a call: the call as far as it went, nothing shown as content.
  const Parsed cut = parse_every_way(fmt(ToolSyntax::kPythonic), false, false, kTools,
                                     "<|tool_call_start|>[search(q='a'), get_weather(city='Ro");
  ASSERT_EQ(cut.calls.size(), 2u);
  EXPECT_EQ(std::get<2>(cut.calls[0]), R"({"q": "a"})");
  EXPECT_EQ(std::get<2>(cut.calls[1]), "{}");
  EXPECT_EQ(cut.content, "");
}

// DeepSeek V3.2: invoke elements in a DSML block, each parameter typed by its string attribute (a string value
// as written, whitespace and a spelled block end included); reasoning and text before the block.
TEST(OutputParser, DsmlInvokes) {
  const std::string p0 = "<｜DSML｜parameter name=\"", p1 = "</｜DSML｜parameter>\n";
  const Parsed p = parse_every_way(
      fmt(ToolSyntax::kDsml), true, false, kTools,
      "<think>two</think>Both.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"search\">\n" + p0 +
          "q\" string=\"true\"> a </｜DSML｜function_calls> " + p1 + "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_weather\">\n" +
          p0 + "days\" string=\"false\">2" + p1 + p0 + "unit\" string=\"false\">[\"c\", 1]" + p1 +
          "</｜DSML｜invoke>\n</｜DSML｜function_calls>Done.");
  EXPECT_EQ(p.reasoning, "two");
  EXPECT_EQ(p.content, "Both.Done.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(std::get<1>(p.calls[0]), "search");
  EXPECT_EQ(std::get<2>(p.calls[0]), R"({"q": " a </｜DSML｜function_calls> "})");
  EXPECT_EQ(std::get<2>(p.calls[1]), R"({"days": 2, "unit": ["c",1]})");
}

TEST(PythonLiteral, ReadsWhatPythonWritesAndSaysWhenItNeedsMore) {
  auto read = [](std::string_view s) {
    nlohmann::ordered_json v;
    size_t end = 0;
    const LiteralRead r = read_python_literal(s, 0, &v, &end);
    return std::make_tuple(r, r == LiteralRead::kDone ? v.dump() : std::string(), end);
  };
  EXPECT_EQ(read("'a\\nb' x"), std::make_tuple(LiteralRead::kDone, std::string(R"("a\nb")"), size_t{6}));
  EXPECT_EQ(std::get<1>(read("\"\\U0001F600\\ud83d\\ude00\\x41\\q\",")), "\"\U0001F600\U0001F600A\\\\q\"");
  EXPECT_EQ(std::get<1>(read("{'k': [1, 2.0, None, False,], 3: true})")), R"({"k":[1,2.0,null,false],"3":true})");
  EXPECT_EQ(std::get<1>(read("123456789012345678901234567890)")), "1.2345678901234568e+29");
  for (const char* more : {"12", "'ab", "[1, 2", "Tru", "None", "{'a'", "'\\u00"})
    EXPECT_EQ(std::get<0>(read(more)), LiteralRead::kMore) << more;
  for (const char* bad : {"abc", "Nonesuch)", "'a\nb'", "{[1]: 2}", "[1 2]", "-)", "'\\ud800x'"})
    EXPECT_EQ(std::get<0>(read(bad)), LiteralRead::kBad) << bad;
  EXPECT_EQ(python_call_text("f", nlohmann::ordered_json::parse(R"({"a": "x\"y", "b": [true, null], "c": 1.5})")),
            R"(f(a="x\"y", b=[true,null], c=1.5))");
}

TEST(OutputParser, ArgumentsStreamBeforeTheCallCloses) {
  ChatOutputParser p(fmt(ToolSyntax::kHermes), false, false, kTools, "c");
  OutputDelta d = p.push("<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"lo");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "search");
  EXPECT_EQ(d.calls[0].arguments, "{\"q\": \"lo");
  d = p.push("ng\"}}\n</tool");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_TRUE(d.calls[0].id.empty());
  EXPECT_EQ(d.calls[0].arguments, "ng\"}");
  EXPECT_TRUE(p.push("_call>").empty());
  EXPECT_EQ(p.n_calls(), 1);
}

// gpt-oss's harmony messages: the analysis channel is reasoning (always, asked for or not), the final channel the
// answer, a commentary message to=functions.NAME a call whose arguments stream; the framing never shows.
TEST(OutputParser, HarmonyChannelsAndCalls) {
  const ChatFormat h = detect_chat_format("<|start|>{{ m }}<|channel|>analysis<|message|>{{ tools }}<|end|>");
  ASSERT_EQ(h.tools, ToolSyntax::kHarmony);
  Parsed p = parse_every_way(h, false, false, {},
                             "<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|><|start|>assistant<|channel|>"
                             "final<|message|>2 + 2 = 4.");
  EXPECT_EQ(p.reasoning, "User asks 2+2. Easy.");
  EXPECT_EQ(p.content, "2 + 2 = 4.");
  EXPECT_TRUE(p.calls.empty());
  p = parse_every_way(h, true, false, kTools,
                      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
                      "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\",\"days\":2}");
  EXPECT_EQ(p.reasoning, "Need weather.");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(std::get<1>(p.calls[0]), "get_weather");
  EXPECT_EQ(std::get<2>(p.calls[0]), R"({"city":"Paris","days":2})");
  // A preamble to the user on the commentary channel, then a call with the recipient first.
  p = parse_every_way(h, true, false, kTools,
                      "<|channel|>commentary<|message|>Looking it up.<|end|><|start|>assistant to=functions.search"
                      "<|channel|>commentary json<|message|>{\"q\": \"x\"}<|call|>");
  EXPECT_EQ(p.content, "Looking it up.");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(std::get<1>(p.calls[0]), "search");
  EXPECT_EQ(std::get<2>(p.calls[0]), R"({"q": "x"})");
  // Arguments stream before the call ends; a tail that may begin <|call|> waits.
  ChatOutputParser s(h, true, false, kTools, "c");
  OutputDelta d = s.push("<|channel|>commentary to=functions.search <|constrain|>json<|message|>{\"q\": \"lo");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "search");
  EXPECT_EQ(d.calls[0].arguments, "{\"q\": \"lo");
  d = s.push("ng\"}<|ca");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, "ng\"}");
  EXPECT_TRUE(s.push("ll|>").empty());
  EXPECT_EQ(s.n_calls(), 1);
}

// Gemma 4: reasoning on the thought channel, calls as call:NAME{...} with bare keys and <|"|>-quoted strings (which
// may hold braces, commas and the close marker), converted to JSON arguments; text around calls is the answer.
TEST(OutputParser, Gemma4ThoughtChannelAndCalls) {
  const ChatFormat g = detect_chat_format("{{ '<|turn>model\n' }}{{ tools }}<|tool_call>call:{{ n }}{}<tool_call|>"
                                          "<|\"|>{{ '<|channel>thought\n<channel|>' }}");
  ASSERT_EQ(g.tools, ToolSyntax::kGemma4);
  Parsed p = parse_every_way(g, true, false, kTools,
                             "<|channel>thought\nThe user wants weather.<channel|>Let me check."
                             "<|tool_call>call:get_weather{city:<|\"|>Paris, {France} <tool_call|><|\"|>,days:2,"
                             "metric:true,where:{lat:48.85,tags:[<|\"|>a<|\"|>,<|\"|>b<|\"|>]},note:null}<tool_call|>");
  EXPECT_EQ(p.reasoning, "The user wants weather.");
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(std::get<1>(p.calls[0]), "get_weather");
  EXPECT_EQ(std::get<2>(p.calls[0]),
            R"({"city":"Paris, {France} <tool_call|>","days":2,"metric":true,"where":{"lat":48.85,"tags":["a","b"]},"note":null})");
  // Two calls in a row, the second without arguments; no reasoning asked for.
  p = parse_every_way(g, false, false, kTools,
                      "<|tool_call>call:search{q:<|\"|>x<|\"|>}<tool_call|><|tool_call>call:get_weather{}<tool_call|>");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(std::get<2>(p.calls[0]), R"({"q":"x"})");
  EXPECT_EQ(std::get<1>(p.calls[1]), "get_weather");
  EXPECT_EQ(std::get<2>(p.calls[1]), "{}");
  EXPECT_EQ(p.content, "");
  // A call cut short (max tokens) keeps its name with empty arguments, never shows markup as content.
  p = parse_every_way(g, false, false, kTools, "<|tool_call>call:search{q:<|\"|>unfinish");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(std::get<2>(p.calls[0]), "{}");
  EXPECT_EQ(p.content, "");
}

// Gemma 4's first template (the one in llama.cpp's gemma-4 vocab file) reads tool results from the calling turn's
// tool_responses; its later one from role: tool messages. A round trip renders the result as the model was trained
// to read it with either.
TEST(ToolFormat, Gemma4ToolResultsRenderInTheCallingTurn) {
  const char* src = std::getenv("CACHET_LLAMACPP_SRC");
  const std::string root = src ? std::string(src) : std::string(std::getenv("HOME")) + "/.cache/cachet/llama.cpp/src-0.3.36";
  const std::string llama = root + "/vendor/llama.cpp/models/";
  auto f = GgufFile::open(llama + "ggml-vocab-gemma-4.gguf");
  ASSERT_TRUE(f.is_ok()) << f.status().message() << " (bash scripts/setup_oracles.sh unpacks it)";
  auto legacy = (*f)->get_string("tokenizer.chat_template");
  ASSERT_TRUE(legacy.is_ok());
  std::ifstream in(llama + "templates/google-gemma-4-31B-it.jinja");
  ASSERT_TRUE(in.good());
  const std::string current((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto messages = nlohmann::ordered_json::parse(R"([
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function",
          "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "c0", "content": "{\"temp\": 21}"},
      {"role": "user", "content": "Thanks"}])");
  // The first template gets the result parsed (as llama.cpp passes it); the later one quotes a string result itself.
  const std::string want_first = "<|tool_response>response:get_weather{temp:21}<tool_response|>";
  const std::string want_current = "<|tool_response>response:get_weather{value:<|\"|>{\"temp\": 21}<|\"|>}<tool_response|>";
  const std::string& first = *legacy;
  for (const std::string* t : {&first, &current}) {
    const ChatFormat fmt = detect_chat_format(*t);
    ASSERT_EQ(fmt.tools, ToolSyntax::kGemma4);
    EXPECT_EQ(fmt.results_in_calling_turn, t == &first);
    ChatTemplateInputs ti;
    ti.messages = fmt.results_in_calling_turn ? results_into_calling_turn(messages) : messages;
    ti.bos_token = "<bos>";
    auto text = render_chat_template(*t, ti);
    ASSERT_TRUE(text.is_ok()) << text.status().message();
    EXPECT_NE(text->find("<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>"), std::string::npos) << *text;
    EXPECT_NE(text->find(t == &first ? want_first : want_current), std::string::npos) << *text;
    EXPECT_EQ(text->find("<|turn>tool"), std::string::npos) << *text;
  }
}

TEST(ToolFormat, DetectsEachFamilyFromItsTemplate) {
  EXPECT_EQ(detect_chat_format("{% for tool in tools %}<tool_call>{% endfor %}<think>").tools, ToolSyntax::kHermes);
  EXPECT_EQ(detect_chat_format("{{ tools }}<tool_call><function=x><parameter=y>").tools, ToolSyntax::kQwenXml);
  EXPECT_EQ(detect_chat_format("<|start_header_id|>{{ tools }}<|python_tag|>").tools, ToolSyntax::kLlama3);
  EXPECT_EQ(detect_chat_format("[AVAILABLE_TOOLS]{{ tools }}[TOOL_CALLS]").tools, ToolSyntax::kMistral);
  EXPECT_EQ(detect_chat_format("{{ tools }}<｜tool▁calls▁begin｜>```json").tools, ToolSyntax::kDeepSeek);
  EXPECT_EQ(detect_chat_format("{{ tools }}<｜tool▁calls▁begin｜>").tools, ToolSyntax::kDeepSeekV31);
  EXPECT_EQ(detect_chat_format("<tool_call>{{ n }}<arg_key>{{ k }}</arg_key>").tools, ToolSyntax::kGlm);
  EXPECT_EQ(detect_chat_format("<|tool_calls_section_begin|>{{ tools }}").tools, ToolSyntax::kKimi);
  EXPECT_EQ(detect_chat_format("{{ tools }}<TOOLCALL>[").tools, ToolSyntax::kNemotron);
  EXPECT_EQ(detect_chat_format("{% set dsml_token = '｜DSML｜' %}{{ tools }}function_calls>").tools, ToolSyntax::kDsml);
  EXPECT_EQ(detect_chat_format("{% set dsml_token = '｜DSML｜' %}{{ tools }}tool_calls>").tools, ToolSyntax::kDsmlV4);
  const ChatFormat lfm2 = detect_chat_format("{{ tools }}List of tools: <|tool_list_start|>[");
  EXPECT_EQ(lfm2.tools, ToolSyntax::kPythonic);
  EXPECT_TRUE(lfm2.calls_in_content);
  EXPECT_FALSE(detect_chat_format("List of tools: [{{ tools }}{{ message.tool_calls }}").calls_in_content);
  const ChatFormat m = detect_chat_format("[TOOL_CALLS]{{ n }}[CALL_ID]{{ i }}[ARGS]{{ a }}[THINK]x[/THINK]");
  EXPECT_EQ(m.tools, ToolSyntax::kMistralArgs);
  EXPECT_TRUE(m.call_ids);
  EXPECT_EQ(m.think_start, "[THINK]");
  EXPECT_EQ(m.call_separator, "");
  const ChatFormat g = detect_chat_format("<|im_start|>{{ message.content }}");
  EXPECT_EQ(g.tools, ToolSyntax::kGeneric);
  EXPECT_FALSE(g.template_renders_tools);
  EXPECT_TRUE(g.think_start.empty());
  EXPECT_EQ(detect_chat_format("<think>").think_end, "</think>");
}

TEST(ToolFormat, StructuralTags) {
  OutputShape s;
  s.format = fmt(ToolSyntax::kHermes, false);
  EXPECT_FALSE(structural_tag_for(s).has_value());  // nothing constrains
  s.tools = kTools;
  s.choice = ToolChoice::kRequired;
  auto tag = nlohmann::ordered_json::parse(*structural_tag_for(s));
  EXPECT_EQ(tag["format"]["type"], "tags_with_separator");
  EXPECT_EQ(tag["format"]["at_least_one"], true);
  EXPECT_EQ(tag["format"]["tags"].size(), 2u);
  s.choice = ToolChoice::kNamed;
  s.named = "search";
  tag = nlohmann::ordered_json::parse(*structural_tag_for(s));
  ASSERT_EQ(tag["format"]["tags"].size(), 1u);
  EXPECT_NE(tag["format"]["tags"][0]["begin"].get<std::string>().find("\"search\""), std::string::npos);
  s.choice = ToolChoice::kAuto;
  s.format = fmt(ToolSyntax::kHermes, true);
  s.reasoning = true;
  s.inside_thinking = true;
  s.thinking_budget = 64;
  tag = nlohmann::ordered_json::parse(*structural_tag_for(s));
  EXPECT_EQ(tag["format"]["type"], "sequence");
  EXPECT_EQ(tag["format"]["elements"][0]["content"]["max_tokens"], 64);
  EXPECT_EQ(tag["format"]["elements"][0]["begin"], "");
  EXPECT_EQ(tag["format"]["elements"][1]["type"], "triggered_tags");
  // Harmony: a required call may follow the analysis message, whose end takes the next message's start along.
  s.format = detect_chat_format("<|channel|>x<|message|>");
  s.inside_thinking = false;
  s.thinking_budget = 0;
  s.choice = ToolChoice::kRequired;
  tag = nlohmann::ordered_json::parse(*structural_tag_for(s));
  EXPECT_EQ(tag["format"]["elements"][0]["content"]["end"], "<|end|><|start|>assistant");
  EXPECT_EQ(tag["format"]["elements"][1]["tags"][0]["begin"],
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>");
}

}  // namespace
}  // namespace cachet
