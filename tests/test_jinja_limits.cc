// Hostile chat templates (a template comes from a downloaded model file): each must end quickly with an error
// naming the limit it hit, within bounded memory, and leave the interpreter usable (chat/jinja_limits.h).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <string>

#include "chat/jinja.h"

namespace cachet::jinja {
namespace {

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Under the sanitizers (the ASan build runs these tests too) everything is several times slower and ASan keeps
// freed memory in quarantine: the bounds are for the release build.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif
constexpr long kMaxRssGrowthKib = kSanitized ? 8L << 20 : 768L << 10;

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

struct Hostile {
  const char* name;
  std::string source;
  const char* expect;  // in the error message
};

std::vector<Hostile> hostile_templates() {
  return {
      {"recursive macro", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "levels deep"},
      {"100k nested parentheses", "{{ " + repeat("(", 100000) + "1" + repeat(")", 100000) + " }}", "nested deeper"},
      {"50k nested ifs", repeat("{% if true %}", 50000) + "x" + repeat("{% endif %}", 50000), "nested deeper"},
      {"1e10-step loop", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "one render"},
      {"string doubled 60 times",
       "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
       "MiB"},
      {"'x' * 10**9", "{{ 'x' * 10**9 }}", "repeated"},
      {"100k filters", "{{ 'a'" + repeat("|upper", 100000) + " }}", "nested deeper"},
      {"huge range", "{{ range(10**12)|length }}", "range"},
      {"self-include", "{% include 'self.jinja' %}", "unsupported tag"},
      {"100k attribute chain", "{{ a" + repeat(".b", 100000) + " }}", "nested deeper"},
      {"100k operator chain", "{{ 1" + repeat(" + 1", 100000) + " }}", "nested deeper"},
      {"100k nots", "{{ " + repeat("not ", 100000) + "true }}", "nested deeper"},
      {"100k unary minus", "{{ " + repeat("-", 100000) + "1 }}", "nested deeper"},
      {"100k nested list literal", "{{ " + repeat("[", 100000) + repeat("]", 100000) + " }}", "nested deeper"},
      {"list appended to itself", "{% set l = [] %}{% set _ = l.append(l) %}{{ l }}", "cycle"},
      {"namespace holding itself", "{% set ns = namespace(x=1) %}{% set ns.x = [ns] %}{{ ns }}", "cycle"},
      {"nesting built by a loop",
       "{% set ns = namespace(cur=[]) %}{% for i in range(100000) %}{% set ns.cur = [ns.cur] %}{% endfor %}{{ ns.cur }}",
       "steps"},  // each mutation checks for a cycle through the whole value: quadratic, so the steps run out
      {"shared halves printed",
       "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}",
       "steps"},
      {"shared halves compared",
       "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}"
       "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}",
       "steps"},
      {"replace blow-up", "{{ ('x' * 1000000).replace('x', 'x' * 1000) }}", "MiB"},
      {"join with a huge separator", "{{ range(100000)|join('x' * 1000000) }}", "MiB"},
      {"indent by 10**9", "{{ ('a\\n' * 1000)|indent(1000000000) }}", "MiB"},
      {"output bomb", "{% for i in range(1000) %}{% for j in range(1000) %}{{ 'x' * 1000 }}{% endfor %}{% endfor %}",
       "output longer"},
      {"set block bomb",
       "{% set b %}{% for i in range(1000) %}{% for j in range(1000) %}{{ 'x' * 1000 }}{% endfor %}{% endfor %}{% endset %}",
       "output longer"},
      {"range past the sandbox's limit", "{% for i in range(100001) %}{% endfor %}", "the limit is 100000"},
      {"range with a huge negative step", "{{ range(9223372036854775807, -9223372036854775807, -1)|length }}", "range"},
  };
}

// "Quickly" is counted, not timed: a render that fails has done at most its step budget (plus the one piece of
// work that crossed it) and built at most its byte budget plus the one value that crossed it.
TEST(JinjaLimits, HostileTemplatesEndQuicklyWithAnErrorAndBoundedMemory) {
  for (const Hostile& h : hostile_templates()) {
    SCOPED_TRACE(h.name);
    const long rss0 = peak_rss_kib();
    Status st = Status::ok();
    RenderStats stats;
    auto t = Template::parse(h.source);
    if (!t.is_ok()) {
      st = t.status();
    } else {
      Dict ctx;
      auto r = t->render(ctx, &stats);
      st = r.is_ok() ? Status::ok() : r.status();
    }
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find(h.expect), std::string::npos) << st.message();
    EXPECT_LE(stats.steps, 2 * Limits::kMaxSteps) << "steps";
    EXPECT_LE(stats.bytes_built, Limits::kMaxTotalBytes + Limits::kMaxValueBytes) << "bytes built";
    EXPECT_LT(peak_rss_kib() - rss0, kMaxRssGrowthKib) << "peak resident memory grew by " << (peak_rss_kib() - rss0) << " KiB";
  }
}

// The render of a template that must parse and render without error ("" and a test failure otherwise).
std::string render_ok(const std::string& src) {
  auto t = Template::parse(src);
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  if (!t.is_ok()) return "";
  auto r = t->render(Dict{});
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? *r : "";
}

// A loop reads its list in place (no copy); a body that appends to that list sees the length the loop began
// with, and the list keeps what was appended (the storage may move under the loop: read by index, not pointer).
TEST(JinjaLimits, LoopOverAListItsBodyAppendsTo) {
  EXPECT_EQ(render_ok("{% set l = [1, 2, 3] %}{% for x in l %}{% for k in range(100) %}{% set _ = l.append(x * 10) %}"
                      "{% endfor %}{{ x }},{% endfor %}{{ l|length }}|{{ range(10, 0, -3)|join(' ') }}|"
                      "{{ range(0)|length }}"),
            "1,2,3,303|10 7 4 1|0");
}

// Integers are int64: a result past it becomes a float instead of wrapping (fuzz_jinja: a signed overflow in
// `111119111111*111111110`), and slicing with a huge step ends instead of overflowing its index.
TEST(JinjaLimits, IntegerOverflowBecomesAFloat) {
  const char* src =
      "{{ 111119111111 * 111111110 > 10**19 }}|{{ 9223372036854775807 + 1 > 9.2e18 }}|"
      "{{ (-9223372036854775807 - 1) - 1 < 0 }}|{{ -(-9223372036854775807 - 1) > 0 }}|"
      "{{ (-9223372036854775807 - 1) // -1 > 0 }}|{{ (-9223372036854775807 - 1)|abs > 0 }}|{{ 2 ** 70 > 10**21 }}|"
      "{{ [9223372036854775807, 9223372036854775807]|sum > 0 }}|{{ (-9223372036854775807 - 1) is divisibleby(-1) }}|"
      "{{ 'abcdef'[1::9223372036854775807] }}|{{ [1, 2, 3][2::-9223372036854775807]|join(',') }}|"
      "{{ 'abc'[-9223372036854775807::-9223372036854775807] }}|{{ 6 * 7 }}|{{ 2 ** 10 }}";
  EXPECT_EQ(render_ok(src), "True|True|True|True|True|True|True|True|True|b|3||42|1024");
}

TEST(JinjaLimits, InfiniteAndNanFloatsUsedAsIntegersSaturate) {
  // fuzz_jinja's finding: -inf as a slice bound was an undefined float -> int conversion.
  auto t = Template::parse("{{ 'abc'[(-1e999):] }}|{{ 'abc'[:1e999] }}|{{ range(3)[(1e999 - 1e999):] }}");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  auto r = t->render(Dict{});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->substr(0, 8), "abc|abc|");
}

TEST(JinjaLimits, RealisticTemplatesStayWithinTheLimits) {
  // A long conversation through a loop-heavy template: well inside every limit.
  const std::string src =
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "<|{{ m.role }}|>{{ m.content | trim }}{% if not loop.last %}\n{% endif %}{% endfor %}"
      "{{ messages | map(attribute='role') | join(',') | length }}";
  auto t = Template::parse(src);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  List msgs;
  for (int i = 0; i < 5000; ++i) {
    Dict m;
    m.set("role", Value(i % 2 ? "assistant" : "user"));
    m.set("content", Value(std::string(200, 'a' + i % 26)));
    msgs.push_back(Value(m));
  }
  Dict ctx;
  ctx.set("messages", Value(msgs));
  auto r = t->render(ctx);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GT(r->size(), 5000u * 200u);
}

TEST(JinjaLimits, LimitsAreExactlyWhereTheyAreDocumented) {
  // Nesting of blocks: kMaxParseNesting levels parse (the body is one level), one more does not.
  const int n = Limits::kMaxParseNesting - 1;
  auto ok = Template::parse(repeat("{% if true %}", n) + "x" + repeat("{% endif %}", n));
  EXPECT_TRUE(ok.is_ok()) << ok.status().message();
  auto deep = Template::parse(repeat("{% if true %}", n + 1) + "x" + repeat("{% endif %}", n + 1));
  EXPECT_FALSE(deep.is_ok());
  // Macro recursion: kMaxCallDepth levels run, one more fails.
  const std::string rec = "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% else %}done{% endif %}{% endmacro %}";
  auto within = Template::parse(rec + "{{ f(" + std::to_string(Limits::kMaxCallDepth - 1) + ") }}");
  ASSERT_TRUE(within.is_ok());
  auto r = within->render(Dict{});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(*r, "done");
  auto beyond = Template::parse(rec + "{{ f(" + std::to_string(Limits::kMaxCallDepth) + ") }}");
  ASSERT_TRUE(beyond.is_ok());
  EXPECT_FALSE(beyond->render(Dict{}).is_ok());
  // A string of exactly the value cap is allowed; one byte more is not.
  auto at_cap = Template::parse("{{ ('x' * " + std::to_string(Limits::kMaxValueBytes) + ")|length }}");
  ASSERT_TRUE(at_cap.is_ok());
  auto r2 = at_cap->render(Dict{});
  ASSERT_TRUE(r2.is_ok()) << r2.status().message();
  EXPECT_EQ(*r2, std::to_string(Limits::kMaxValueBytes));
  auto over = Template::parse("{{ ('x' * " + std::to_string(Limits::kMaxValueBytes + 1) + ")|length }}");
  ASSERT_TRUE(over.is_ok());
  EXPECT_FALSE(over->render(Dict{}).is_ok());
}

}  // namespace
}  // namespace cachet::jinja
