// Internal: the syntax tree shared by the parser (jinja_parse.cc) and the evaluator (jinja_eval.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/jinja_limits.h"
#include "chat/jinja_value.h"

namespace cachet::jinja {

struct Expr {
  enum class Kind {
    kLiteral, kName, kList, kDict, kAttr, kIndex, kSlice, kCall, kFilter, kTest, kUnary, kBinary, kCond,
  };
  Kind kind;
  int line = 0;
  Value literal;                                   // kLiteral
  std::string name;                                // kName, kAttr (attribute), kFilter, kTest, op for kUnary/kBinary
  std::vector<std::unique_ptr<Expr>> items;        // kList, kDict (k, v, k, v...), kCall/kFilter/kTest args
  std::vector<std::string> kw_names;               // keyword argument names, aligned to the tail of `items`
  std::unique_ptr<Expr> a, b, c;                   // operands: object/callee/lhs, index/rhs, slice step/else
  bool negated = false;                            // kTest: "is not"
  int depth = 1;                                   // of this node's tree (the parser bounds it)
};

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kBlock };
  Kind kind;
  int line = 0;
  std::string text;                                  // kText
  std::unique_ptr<Expr> expr;                        // kOutput, kFor iterable, kSet value
  std::vector<std::unique_ptr<Expr>> conds;          // kIf: one per branch (else has none)
  std::vector<std::vector<std::unique_ptr<Node>>> branches;  // kIf branches (+ else), kFor body (+ else)
  std::vector<std::string> targets;                  // kFor loop variables; kSet: names, or {ns, attr}
  bool attr_target = false;                          // kSet / kSetBlock: targets are {ns, attr} (set ns.attr = ...)
  std::unique_ptr<Expr> filter;                      // kFor: "for x in xs if cond"
  std::string name;                                  // kMacro name
  std::vector<std::string> params;                   // kMacro
  std::vector<std::unique_ptr<Expr>> defaults;       // kMacro, aligned to the tail of params
};

using Body = std::vector<std::unique_ptr<Node>>;

Result<Body> parse_template(const std::string& source);
Result<std::string> render_body(const Body& body, const Dict& context, RenderStats* stats = nullptr);

}  // namespace cachet::jinja
