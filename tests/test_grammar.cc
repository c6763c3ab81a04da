// Constrained decoding without a server: what a JSON schema may ask (refused by name when it would not be
// enforced; allOf merged), the grammar's masks on a real vocabulary (GPT-2's), and the engine: a constrained
// request's ids are the same bits whatever shares its batch, with chunked prefill and with speculation, and every
// output is a sentence of its grammar.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine.h"
#include "chat/output_parser.h"
#include "chat/tool_format.h"
#include "grammar/grammar.h"
#include "grammar/schema_check.h"
#include "io/gguf.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

namespace cachet {
namespace {

using ojson = nlohmann::ordered_json;

std::unique_ptr<Tokenizer> gpt2() {
  auto f = GgufFile::open(testing::shared_dir() + "/vocab/ggml-vocab-gpt-2.gguf");
  EXPECT_TRUE(f.is_ok());
  auto t = Tokenizer::from_gguf(**f);
  EXPECT_TRUE(t.is_ok());
  return std::move(t).value();
}

constexpr int32_t kEos = 50256;  // GPT-2's <|endoftext|>

std::string refusal(const std::string& schema) {
  auto r = check_json_schema(schema);
  return r.is_ok() ? std::string() : r.status().message();
}

TEST(SchemaCheck, RefusesWhatWouldNotBeEnforcedByName) {
  EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"not": {"type": "string"}}}})").find("#/properties/a/not"),
            std::string::npos);
  for (const char* k : {"if", "dependentRequired", "contains", "unevaluatedProperties", "additionalItems",
                        "patternProperties", "propertyNames"}) {
    const std::string s = std::string(R"({"type": "object", ")") + k + R"(": {}})";
    EXPECT_NE(refusal(s).find(std::string("'") + k + "'"), std::string::npos) << k;
  }
  EXPECT_NE(refusal(R"({"type": "array", "uniqueItems": true})").find("uniqueItems"), std::string::npos);
  EXPECT_EQ(refusal(R"({"type": "array", "uniqueItems": false})"), "");
  EXPECT_NE(refusal(R"({"type": "array", "items": [{"type": "string"}]})").find("prefixItems"), std::string::npos);
  EXPECT_NE(refusal(R"({"$ref": "http://example.com/s.json"})").find("local"), std::string::npos);
  EXPECT_NE(refusal(R"({"$ref": "#/$defs/missing"})").find("points nowhere"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "string", "format": "credit-card"})").find("credit-card"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "strnig"})").find("strnig"), std::string::npos);
  // The grammar takes the pattern or the format; a length beside either would be dropped.
  EXPECT_NE(refusal(R"({"type": "object", "properties": {"z": {"type": "string", "pattern": "^[0-9]+$",
      "maxLength": 5}}})").find("#/properties/z/maxLength"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "string", "format": "email", "minLength": 3})").find("minLength"), std::string::npos);
  EXPECT_EQ(refusal(R"({"type": "string", "format": "email", "minLength": 0})"), "");
  EXPECT_NE(refusal("[1, 2]").find("object or a boolean"), std::string::npos);
  EXPECT_NE(refusal("{").find("not valid JSON"), std::string::npos);
  // Annotations and everything enforced pass.
  EXPECT_EQ(refusal(R"({"title": "t", "description": "d", "type": "object", "properties": {
      "s": {"type": "string", "minLength": 1, "maxLength": 8, "examples": ["x"]},
      "e": {"enum": ["a", "b"]}, "c": {"const": 3}, "n": {"type": "number", "minimum": 0, "exclusiveMaximum": 5},
      "i": {"type": "integer", "multipleOf": 2}, "d": {"type": "string", "format": "date-time"},
      "p": {"type": "string", "pattern": "^[a-z]+$"}, "arr": {"type": "array", "items": {"$ref": "#/$defs/x"},
      "minItems": 1, "maxItems": 3}, "u": {"anyOf": [{"type": "null"}, {"type": "boolean"}]}},
      "required": ["s"], "additionalProperties": false, "$defs": {"x": {"type": "integer"}}})"),
            "");
  // What stands beside anyOf / $ref / enum is folded in (the grammar would read only the first).
  auto f = check_json_schema(ojson::parse(R"({"type": "string", "anyOf": [{"maxLength": 2}, {"minLength": 4}]})"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_FALSE(f->contains("type"));
  EXPECT_EQ((*f)["anyOf"][0]["type"], "string");
  EXPECT_EQ((*f)["anyOf"][1]["minLength"], 4);
  f = check_json_schema(ojson::parse(R"({"type": "string", "enum": [1, "a", null, "b"]})"));
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ((*f)["enum"], ojson::parse(R"(["a", "b"])"));
  f = check_json_schema(ojson::parse(R"({"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n", "maximum": 3})"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)["type"], "integer");
  EXPECT_EQ((*f)["maximum"], 3);
}

TEST(SchemaCheck, OneOfWithDisjointBranchesIsAnyOf) {
  for (const char* s : {
           R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})",
           R"({"oneOf": [{"const": 1}, {"enum": [2, 3]}]})",
           R"({"oneOf": [{"type": "object", "properties": {"id": {}}, "required": ["id"], "additionalProperties": false},
                         {"type": "object", "properties": {"email": {}}, "required": ["email"]}]})",
           R"({"oneOf": [{"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                         {"properties": {"kind": {"const": "b"}, "x": {}}, "required": ["kind", "x"]}]})"}) {
    auto r = check_json_schema(ojson::parse(s));
    ASSERT_TRUE(r.is_ok()) << s;
    EXPECT_TRUE(r->contains("anyOf") && !r->contains("oneOf")) << s;
  }
  // Overlapping branches stay oneOf (the grammar compiler then refuses what it cannot enforce exactly).
  auto r = check_json_schema(ojson::parse(R"({"oneOf": [{"type": "number"}, {"type": "integer"}]})"));
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->contains("oneOf"));
}

TEST(SchemaCheck, DatesAreExactCalendarDates) {
  auto tok = gpt2();
  GrammarCompiler gc(*tok, {kEos}, tok->n_vocab());
  auto g = gc.json_schema(R"({"type": "string", "format": "date"})");
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  auto valid = [&](const std::string& date) {
    auto m = (*g)->matcher();
    for (int32_t id : tok->encode("\"" + date + "\"", false, false))
      if (!m->accept(id)) return false;
    return m->completed();
  };
  for (const char* d : {"2024-02-29", "2000-02-29", "2023-02-28", "2023-12-31", "1999-04-30"}) EXPECT_TRUE(valid(d)) << d;
  for (const char* d : {"2023-02-29", "1900-02-29", "2023-02-30", "2023-04-31", "2023-13-01", "2023-00-10"})
    EXPECT_FALSE(valid(d)) << d;
  auto dt = gc.json_schema(R"({"type": "string", "format": "date-time"})");
  ASSERT_TRUE(dt.is_ok()) << dt.status().message();
  EXPECT_NE(refusal(R"({"type": "string", "format": "date", "pattern": "^2"})").find("pattern"), std::string::npos);
}

TEST(SchemaCheck, MergesAllOf) {
  auto r = check_json_schema(ojson::parse(R"({"allOf": [
      {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}, "required": ["a"]},
      {"$ref": "#/$defs/b"},
      {"properties": {"a": {"maximum": 9}}}],
      "$defs": {"b": {"type": ["object", "null"], "properties": {"b": {"type": "string"}}, "required": ["b"]}}})"));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const ojson& s = *r;
  EXPECT_FALSE(s.contains("allOf"));
  EXPECT_EQ(s["type"], "object");
  EXPECT_EQ(s["required"], ojson::parse(R"(["a", "b"])"));
  EXPECT_EQ(s["properties"]["a"]["minimum"], 0);
  EXPECT_EQ(s["properties"]["a"]["maximum"], 9);
  EXPECT_EQ(s["properties"]["b"]["type"], "string");
  // A branch closed to its own properties removes the others', and cannot be asked for them.
  auto closed = check_json_schema(ojson::parse(R"({"allOf": [
      {"properties": {"a": {}}, "additionalProperties": false}, {"properties": {"b": {}}}]})"));
  ASSERT_TRUE(closed.is_ok());
  EXPECT_FALSE((*closed)["properties"].contains("b"));
  EXPECT_NE(refusal(R"({"allOf": [{"properties": {"a": {}}, "additionalProperties": false},
      {"required": ["b"]}]})").find("forbids"), std::string::npos);
  EXPECT_NE(refusal(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})").find("no common type"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"allOf": [{"enum": [1, 2]}, {"enum": [3]}]})").find("no common value"), std::string::npos);
}

// A request's text compiles once: the same schema, grammar or tag again is the same compiled grammar (no
// conversion, no compile), a refused one the same refusal; strictness and kind are part of what is looked up.
TEST(Grammar, CompiledOncePerRequestText) {
  auto tok = gpt2();
  GrammarCompiler gc(*tok, {kEos}, tok->n_vocab());
  const std::string schema = R"({"type": "object", "properties": {"a": {"type": "integer"}}})";
  auto a = gc.json_schema(schema), b = gc.json_schema(schema), loose = gc.json_schema(schema, false);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && loose.is_ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_NE(a->get(), loose->get());
  auto e1 = gc.ebnf("root ::= \"x\""), e2 = gc.ebnf("root ::= \"x\""), r = gc.regex("root ::= \"x\"");
  ASSERT_TRUE(e1.is_ok() && e2.is_ok());
  EXPECT_EQ(e1->get(), e2->get());
  EXPECT_TRUE(!r.is_ok() || r->get() != e1->get());
  auto bad1 = gc.ebnf("root ::= nowhere"), bad2 = gc.ebnf("root ::= nowhere");
  ASSERT_FALSE(bad1.is_ok());
  EXPECT_EQ(bad1.status().message(), bad2.status().message());
}

bool allowed(const std::vector<uint32_t>& mask, int32_t id) { return (mask[id / 32] >> (id % 32)) & 1u; }

TEST(Grammar, MasksFollowAJsonSchemaOnARealVocabulary) {
  auto tok = gpt2();
  GrammarCompiler gc(*tok, {kEos}, tok->n_vocab());
  auto g = gc.json_schema(R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
      "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"],
      "additionalProperties": false})");
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  auto m = (*g)->matcher();
  std::vector<uint32_t> mask(static_cast<size_t>(GrammarMatcher::mask_words(tok->n_vocab())));
  const std::vector<int32_t> ids = tok->encode(R"({"city": "Paris", "days": 3})", false, false);
  for (size_t k = 0; k < ids.size(); ++k) {
    const int32_t id = ids[k];
    const int64_t n = m->fill_mask(mask);
    EXPECT_GT(n, 0);
    EXPECT_LT(n, k == 0 ? 1000 : tok->n_vocab());  // an object must open first; no step is a free run
    EXPECT_TRUE(allowed(mask, id)) << tok->token_to_piece(id, false);
    EXPECT_FALSE(allowed(mask, kEos));
    ASSERT_TRUE(m->accept(id));
  }
  EXPECT_TRUE(m->completed());
  m->fill_mask(mask);
  EXPECT_TRUE(allowed(mask, kEos));
  // Tokens the grammar does not allow are refused and change nothing.
  EXPECT_FALSE(m->accept(tok->encode("x", false, false)[0]));
  ASSERT_TRUE(m->accept(kEos));
  EXPECT_TRUE(m->terminated());
  EXPECT_EQ(m->fill_mask(mask), 0);
  // Rollback: back two tokens, the same mask as then.
  auto m2 = (*g)->matcher();
  std::vector<uint32_t> before(mask.size()), after(mask.size());
  ASSERT_TRUE(m2->accept(ids[0]));
  m2->fill_mask(before);
  ASSERT_TRUE(m2->accept(ids[1]));
  ASSERT_TRUE(m2->accept(ids[2]));
  m2->rollback(2);
  m2->fill_mask(after);
  EXPECT_EQ(before, after);
  // A masked row: -inf exactly where the mask is 0.
  std::vector<float> logits(static_cast<size_t>(tok->n_vocab()), 1.0f);
  apply_token_mask(before, logits.data(), tok->n_vocab());
  for (int32_t id = 0; id < tok->n_vocab(); ++id) ASSERT_EQ(std::isinf(logits[id]), !allowed(before, id));
}

// Gemma 4's calls in its own syntax (bare keys, <|"|>-quoted strings): a required call's grammar admits the call
// the model writes, refuses a wrong type or an unknown key, and the parser reads it back as JSON arguments.
TEST(Grammar, Gemma4RequiredCallFollowsTheSchemaInItsOwnSyntax) {
  auto tok = gpt2();
  GrammarCompiler gc(*tok, {kEos}, tok->n_vocab());
  OutputShape sh;
  sh.format = detect_chat_format("<|tool_call>call:{{ n }}<tool_call|><|\"|>");
  ASSERT_EQ(sh.format.tools, ToolSyntax::kGemma4);
  sh.tools = {{"get_weather", nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city", "days"],
      "additionalProperties": false})")}};
  sh.choice = ToolChoice::kRequired;
  auto g = gc.structural_tag(*structural_tag_for(sh));
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  auto walk = [&](const std::string& text) {
    auto m = (*g)->matcher();
    for (int32_t id : tok->encode(text, false, false))
      if (!m->accept(id)) return false;
    return m->completed();
  };
  const std::string call = "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|>";
  EXPECT_TRUE(walk(call));
  EXPECT_FALSE(walk("<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:<|\"|>3<|\"|>}<tool_call|>"));
  EXPECT_FALSE(walk("<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3,x:1}<tool_call|>"));
  EXPECT_FALSE(walk("<|tool_call>call:get_time{}<tool_call|>"));
  ChatOutputParser p(sh.format, false, false, sh.tools, "c");
  OutputDelta d = p.push(call);
  d.append(p.finish());
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "get_weather");
  EXPECT_EQ(d.calls[0].arguments, R"({"city":"Paris","days":3})");
}

TEST(Grammar, GbnfLarkRegexAndTheirErrors) {
  auto tok = gpt2();
  GrammarCompiler gc(*tok, {kEos}, tok->n_vocab());
  for (auto g : {gc.ebnf(R"(root ::= ("yes" | "no") " " [0-9]+)"), gc.lark("start: (\"yes\" | \"no\") \" \" /[0-9]+/"),
                 gc.regex("(yes|no) [0-9]+")}) {
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    auto m = (*g)->matcher();
    for (int32_t id : tok->encode("no 42", false, false)) ASSERT_TRUE(m->accept(id));
    EXPECT_TRUE(m->completed());
  }
  auto bad = gc.ebnf("root ::= missing_rule");
  EXPECT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("grammar"), std::string::npos);
  EXPECT_FALSE(gc.json_schema(R"({"type": "number", "multipleOf": 0.5})").is_ok());  // XGrammar would ignore it
}

// A model with GPT-2's vocabulary size (random weights): constrained requests among free ones.
std::unique_ptr<Model> gpt2_sized_model() {
  SyntheticSpec s;
  s.type = DType::kQ8_0;
  s.n_vocab = 50257;
  s.n_embd = 64;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_layer = 2;
  const std::string path = testing::temp_path("grammar_gpt2_sized.gguf");
  EXPECT_TRUE(write_synthetic_model(s, path).is_ok());
  auto m = load_model(path, {2});
  EXPECT_TRUE(m.is_ok());
  return std::move(m).value();
}

std::map<RequestId, std::vector<int32_t>> run(Engine& e) {
  std::map<RequestId, std::vector<int32_t>> out;
  while (e.has_work()) {
    auto evs = e.step();
    EXPECT_TRUE(evs.is_ok()) << evs.status().message();
    if (!evs.is_ok()) break;
    for (const RequestEvent& ev : *evs)
      if (ev.token) out[ev.id].push_back(*ev.token);
  }
  return out;
}

TEST(Grammar, ConstrainedIdsAreTheSameBitsWhateverSharesTheBatchAndWithSpeculation) {
  auto tok = gpt2();
  auto model = gpt2_sized_model();
  GrammarCompiler gc(*tok, {kEos}, model->config().n_vocab);
  auto schema = gc.json_schema(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
      "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}}, "required": ["name", "tags"],
      "additionalProperties": false})");
  auto digits = gc.ebnf(R"(root ::= [0-9] [0-9] ("," [0-9] [0-9])*)");
  ASSERT_TRUE(schema.is_ok() && digits.is_ok());
  std::mt19937 rng(5);
  struct Job {
    std::vector<int32_t> prompt;
    SamplingParams p;
  };
  std::vector<Job> jobs;
  for (int i = 0; i < 8; ++i) {
    Job j;
    for (int k = 0; k < 5 + i * 7; ++k) j.prompt.push_back(static_cast<int32_t>(rng() % 50000));
    j.p.max_tokens = 40;
    j.p.temperature = i % 2 ? 0.8f : 0.0f;
    j.p.seed = 100 + i;
    if (i % 3 == 0) j.p.grammar = *schema;
    if (i % 3 == 1) j.p.grammar = *digits;
    jobs.push_back(j);
  }
  auto run_cfg = [&](EngineConfig cfg, const std::vector<int>& which) {
    auto e = Engine::create(*model, cfg);
    EXPECT_TRUE(e.is_ok());
    std::map<int, RequestId> ids;
    for (int i : which) ids[i] = *(*e)->add_request(jobs[i].prompt, jobs[i].p, {}, true);
    auto out = run(**e);
    std::map<int, std::vector<int32_t>> by_job;
    for (auto [i, id] : ids) by_job[i] = out[id];
    return by_job;
  };
  EngineConfig base;
  base.n_blocks = 256;
  std::vector<int> all(jobs.size());
  std::iota(all.begin(), all.end(), 0);
  const auto together = run_cfg(base, all);
  for (int i = 0; i < static_cast<int>(jobs.size()); ++i) {
    EXPECT_EQ(run_cfg(base, {i}).at(i), together.at(i)) << "job " << i << " alone";
    if (!jobs[i].p.grammar) continue;
    // Every constrained output is a sentence of its grammar (ended by EOS, or cut by max_tokens).
    auto m = jobs[i].p.grammar->matcher();
    for (int32_t id : together.at(i)) ASSERT_TRUE(m->accept(id)) << "job " << i;
  }
  EngineConfig chunked = base;
  chunked.prefill_chunk = 16;
  chunked.max_batch_tokens = 24;
  EXPECT_EQ(run_cfg(chunked, all), together);
  // Speculation: drafts are checked against the grammar; greedy requests give the same ids (sampled ones follow
  // the speculative sampling rule, another draw of the same distribution).
  EngineConfig spec = base;
  spec.spec = SpecMode::kLookup;
  spec.spec_adaptive = false;
  spec.draft_max = 4;
  const auto speculated = run_cfg(spec, all);
  for (int i = 0; i < static_cast<int>(jobs.size()); ++i) {
    if (jobs[i].p.temperature == 0.0f) EXPECT_EQ(speculated.at(i), together.at(i)) << "job " << i;
    if (!jobs[i].p.grammar) continue;
    auto m = jobs[i].p.grammar->matcher();
    for (int32_t id : speculated.at(i)) ASSERT_TRUE(m->accept(id)) << "job " << i;
  }
}

}  // namespace
}  // namespace cachet
