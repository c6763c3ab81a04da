// Jinja lexer and parser: template text -> pieces (text, {{ }}, {% %}) with whitespace control applied,
// then a recursive-descent parser over them following jinja2's grammar and operator precedence.
#include <cctype>
#include <cstring>

#include "chat/jinja_ast.h"

namespace cachet::jinja {

namespace {

struct Token {
  enum class Kind { kName, kString, kInt, kFloat, kOp, kEnd };
  Kind kind;
  std::string text;
  int64_t i = 0;
  double f = 0.0;
};

struct Piece {
  enum class Kind { kText, kExpr, kStmt };
  Kind kind;
  std::string text;
  std::vector<Token> tokens;
  int line;
};

Status syntax_error(int line, const std::string& what) {
  return invalid_argument("chat template line " + std::to_string(line) + ": " + what);
}

// Lexes one tag's inside, starting at s[pos]; stops at the closing delimiter (`close`, with an optional
// '-' before it). Returns the position after the delimiter and whether it had the '-'.
Status lex_tag(const std::string& s, size_t& pos, const char* close, int line, std::vector<Token>* out, bool* strip_after) {
  const size_t n = s.size();
  for (;;) {
    while (pos < n && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
    if (pos >= n) return syntax_error(line, std::string("missing '") + close + "'");
    if (s.compare(pos, 2, close) == 0) {
      pos += 2;
      *strip_after = false;
      return Status::ok();
    }
    if ((s[pos] == '-' || s[pos] == '+') && s.compare(pos + 1, 2, close) == 0) {
      *strip_after = s[pos] == '-';
      pos += 3;
      return Status::ok();
    }
    const char c = s[pos];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = pos;
      while (pos < n && (std::isalnum(static_cast<unsigned char>(s[pos])) || s[pos] == '_')) ++pos;
      out->push_back({Token::Kind::kName, s.substr(b, pos - b)});
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t b = pos;
      bool is_float = false;
      while (pos < n && (std::isdigit(static_cast<unsigned char>(s[pos])) || s[pos] == '_')) ++pos;
      if (pos + 1 < n && s[pos] == '.' && std::isdigit(static_cast<unsigned char>(s[pos + 1]))) {
        is_float = true;
        ++pos;
        while (pos < n && std::isdigit(static_cast<unsigned char>(s[pos]))) ++pos;
      }
      if (pos < n && (s[pos] == 'e' || s[pos] == 'E')) {
        is_float = true;
        ++pos;
        if (pos < n && (s[pos] == '+' || s[pos] == '-')) ++pos;
        while (pos < n && std::isdigit(static_cast<unsigned char>(s[pos]))) ++pos;
      }
      std::string num;
      for (size_t k = b; k < pos; ++k)
        if (s[k] != '_') num += s[k];
      Token t{is_float ? Token::Kind::kFloat : Token::Kind::kInt, num};
      if (is_float) t.f = std::strtod(num.c_str(), nullptr);
      else t.i = std::strtoll(num.c_str(), nullptr, 10);
      out->push_back(t);
    } else if (c == '\'' || c == '"') {
      std::string v;
      ++pos;
      while (pos < n && s[pos] != c) {
        if (s[pos] == '\\' && pos + 1 < n) {
          char e = s[++pos];
          switch (e) {
            case 'n': v += '\n'; break;
            case 't': v += '\t'; break;
            case 'r': v += '\r'; break;
            case '\\': v += '\\'; break;
            case '\'': v += '\''; break;
            case '"': v += '"'; break;
            default: v += '\\'; v += e;
          }
          ++pos;
        } else {
          v += s[pos++];
        }
      }
      if (pos >= n) return syntax_error(line, "unterminated string");
      ++pos;
      out->push_back({Token::Kind::kString, v});
    } else {
      static const char* const kTwo[] = {"==", "!=", "<=", ">=", "//", "**"};
      std::string op(1, c);
      for (const char* t : kTwo)
        if (s.compare(pos, 2, t) == 0) op = t;
      if (op.size() == 1 && !std::strchr("+-*/%~<>=()[]{},.:|", c))
        return syntax_error(line, std::string("unexpected character '") + c + "'");
      pos += op.size();
      out->push_back({Token::Kind::kOp, op});
    }
  }
}

Result<std::vector<Piece>> lex(const std::string& s) {
  std::vector<Piece> pieces;
  size_t pos = 0;
  int line = 1;
  bool trim_next = false;   // trim_blocks: drop one newline after a block tag
  bool strip_next = false;  // '-' on the previous closing delimiter
  auto count_lines = [&](size_t from, size_t to) {
    for (size_t k = from; k < to; ++k) line += s[k] == '\n';
  };
  while (pos < s.size()) {
    size_t open = s.find('{', pos);
    while (open != std::string::npos && open + 1 < s.size() && !std::strchr("{%#", s[open + 1])) open = s.find('{', open + 1);
    if (open + 1 >= s.size()) open = std::string::npos;
    std::string text = s.substr(pos, (open == std::string::npos ? s.size() : open) - pos);
    const int text_line = line;
    count_lines(pos, open == std::string::npos ? s.size() : open);
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
      text.erase(0, k);
    } else if (trim_next && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);
    }
    strip_next = trim_next = false;
    if (open == std::string::npos) {
      if (!text.empty()) pieces.push_back({Piece::Kind::kText, text, {}, text_line});
      break;
    }
    const char kind = s[open + 1];
    size_t p = open + 2;
    const bool minus = p < s.size() && s[p] == '-';
    const bool plus = p < s.size() && s[p] == '+';
    if (minus || plus) ++p;
    if (minus) {
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    } else if (!plus && kind != '{') {
      // lstrip_blocks: a block tag preceded on its source line only by spaces and tabs takes them with it.
      size_t k = open;
      while (k > pos && (s[k - 1] == ' ' || s[k - 1] == '\t')) --k;
      if (k == 0 || s[k - 1] == '\n') {
        size_t drop = open - k;
        while (drop > 0 && !text.empty() && (text.back() == ' ' || text.back() == '\t')) {
          text.pop_back();
          --drop;
        }
      }
    }
    if (!text.empty()) pieces.push_back({Piece::Kind::kText, text, {}, text_line});
    if (kind == '#') {
      size_t close = s.find("#}", p);
      if (close == std::string::npos) return syntax_error(line, "unterminated comment");
      strip_next = close > 0 && s[close - 1] == '-';
      count_lines(open, close + 2);
      pos = close + 2;
      trim_next = !strip_next;
      continue;
    }
    Piece piece{kind == '{' ? Piece::Kind::kExpr : Piece::Kind::kStmt, "", {}, line};
    bool strip_after = false;
    size_t q = p;
    CACHET_RETURN_IF_ERROR(lex_tag(s, q, kind == '{' ? "}}" : "%}", line, &piece.tokens, &strip_after));
    count_lines(open, q);
    pos = q;
    strip_next = strip_after;
    trim_next = kind == '%' && !strip_after;
    // {% raw %} ... {% endraw %}: the text in between is output as is.
    if (kind == '%' && piece.tokens.size() == 1 && piece.tokens[0].text == "raw") {
      size_t end = s.find("endraw", pos);
      size_t tag = end == std::string::npos ? end : s.rfind("{%", end);
      if (tag == std::string::npos) return syntax_error(line, "{% raw %} without {% endraw %}");
      std::string raw = s.substr(pos, tag - pos);
      if (trim_next && !raw.empty() && raw[0] == '\n') raw.erase(0, 1);
      pieces.push_back({Piece::Kind::kText, raw, {}, line});
      size_t close = s.find("%}", end);
      count_lines(pos, close + 2);
      pos = close + 2;
      trim_next = true;
      continue;
    }
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

class Parser {
 public:
  explicit Parser(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

  Result<Body> parse_all() {
    Body body;
    CACHET_RETURN_IF_ERROR(parse_nodes(&body, {}));
    if (i_ < pieces_.size())
      return syntax_error(pieces_[i_].line, "unexpected '{% " + pieces_[i_].tokens[0].text + " %}'");
    return body;
  }

 private:
  // Parses nodes until a statement whose keyword is in `stop` (left unconsumed) or the end.
  Status parse_nodes(Body* body, const std::vector<std::string>& stop) {
    Nesting nest(this);
    if (nest.too_deep()) return nesting_error();
    while (i_ < pieces_.size()) {
      Piece& p = pieces_[i_];
      if (p.kind == Piece::Kind::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->text = p.text;
        body->push_back(std::move(n));
        ++i_;
        continue;
      }
      toks_ = &p.tokens;
      t_ = 0;
      line_ = p.line;
      if (p.kind == Piece::Kind::kExpr) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = line_;
        CACHET_ASSIGN_OR_RETURN(n->expr, expression());
        CACHET_RETURN_IF_ERROR(expect_end());
        body->push_back(std::move(n));
        ++i_;
        continue;
      }
      if (p.tokens.empty() || p.tokens[0].kind != Token::Kind::kName) return syntax_error(line_, "empty {% %} tag");
      const std::string kw = p.tokens[0].text;
      for (const auto& s : stop)
        if (kw == s) return Status::ok();
      t_ = 1;
      ++i_;
      std::unique_ptr<Node> n;
      if (kw == "if") {
        CACHET_ASSIGN_OR_RETURN(n, parse_if());
      } else if (kw == "for") {
        CACHET_ASSIGN_OR_RETURN(n, parse_for());
      } else if (kw == "set") {
        CACHET_ASSIGN_OR_RETURN(n, parse_set());
      } else if (kw == "macro") {
        CACHET_ASSIGN_OR_RETURN(n, parse_macro());
      } else if (kw == "break" || kw == "continue") {
        n = std::make_unique<Node>();
        n->kind = kw == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
        CACHET_RETURN_IF_ERROR(expect_end());
      } else if (kw == "generation") {
        // HF's marker for assistant-token masks: renders its body unchanged.
        n = std::make_unique<Node>();
        n->kind = Node::Kind::kBlock;
        CACHET_RETURN_IF_ERROR(expect_end());
        n->branches.emplace_back();
        CACHET_RETURN_IF_ERROR(parse_nodes(&n->branches[0], {"endgeneration"}));
        CACHET_RETURN_IF_ERROR(close("endgeneration"));
      } else {
        return syntax_error(line_, "unsupported tag '{% " + kw + " %}'");
      }
      n->line = p.line;
      body->push_back(std::move(n));
    }
    if (!stop.empty()) return syntax_error(line_, "missing {% " + stop.back() + " %}");
    return Status::ok();
  }

  Status close(const std::string& kw) {
    if (i_ >= pieces_.size()) return syntax_error(line_, "missing {% " + kw + " %}");
    toks_ = &pieces_[i_].tokens;
    line_ = pieces_[i_].line;
    if ((*toks_)[0].text != kw) return syntax_error(line_, "expected {% " + kw + " %}");
    t_ = 1;
    ++i_;
    return expect_end();
  }

  Result<std::unique_ptr<Node>> parse_if() {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kIf;
    for (;;) {
      CACHET_ASSIGN_OR_RETURN(auto cond, expression());
      CACHET_RETURN_IF_ERROR(expect_end());
      n->conds.push_back(std::move(cond));
      n->branches.emplace_back();
      CACHET_RETURN_IF_ERROR(parse_nodes(&n->branches.back(), {"elif", "else", "endif"}));
      if (i_ >= pieces_.size()) return syntax_error(line_, "missing {% endif %}");
      const std::string kw = pieces_[i_].tokens[0].text;
      toks_ = &pieces_[i_].tokens;
      line_ = pieces_[i_].line;
      t_ = 1;
      ++i_;
      if (kw == "elif") continue;
      if (kw == "else") {
        CACHET_RETURN_IF_ERROR(expect_end());
        n->branches.emplace_back();
        CACHET_RETURN_IF_ERROR(parse_nodes(&n->branches.back(), {"endif"}));
        CACHET_RETURN_IF_ERROR(close("endif"));
        return n;
      }
      CACHET_RETURN_IF_ERROR(expect_end());
      return n;
    }
  }

  Result<std::unique_ptr<Node>> parse_for() {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kFor;
    do {
      if (peek().kind != Token::Kind::kName) return syntax_error(line_, "expected a loop variable");
      n->targets.push_back(next().text);
    } while (accept(","));
    if (!accept_name("in")) return syntax_error(line_, "expected 'in' in for");
    CACHET_ASSIGN_OR_RETURN(n->expr, ternary(false));
    if (accept_name("if")) {
      CACHET_ASSIGN_OR_RETURN(n->filter, or_expr());
    }
    accept_name("recursive");
    CACHET_RETURN_IF_ERROR(expect_end());
    n->branches.emplace_back();
    CACHET_RETURN_IF_ERROR(parse_nodes(&n->branches[0], {"else", "endfor"}));
    if (i_ < pieces_.size() && pieces_[i_].tokens[0].text == "else") {
      toks_ = &pieces_[i_].tokens;
      t_ = 1;
      ++i_;
      CACHET_RETURN_IF_ERROR(expect_end());
      n->branches.emplace_back();
      CACHET_RETURN_IF_ERROR(parse_nodes(&n->branches[1], {"endfor"}));
    }
    CACHET_RETURN_IF_ERROR(close("endfor"));
    return n;
  }

  Result<std::unique_ptr<Node>> parse_set() {
    auto n = std::make_unique<Node>();
    if (peek().kind != Token::Kind::kName) return syntax_error(line_, "expected a name after set");
    n->targets.push_back(next().text);
    if (accept(".")) {
      n->targets.push_back(next().text);
      n->attr_target = true;
    }
    while (!n->attr_target && accept(",")) n->targets.push_back(next().text);  // set a, b = ... (tuple unpack)
    if (accept("=")) {
      n->kind = Node::Kind::kSet;
      CACHET_ASSIGN_OR_RETURN(n->expr, expression());
      CACHET_RETURN_IF_ERROR(expect_end());
      return n;
    }
    n->kind = Node::Kind::kSetBlock;
    CACHET_RETURN_IF_ERROR(expect_end());
    n->branches.emplace_back();
    CACHET_RETURN_IF_ERROR(parse_nodes(&n->branches[0], {"endset"}));
    CACHET_RETURN_IF_ERROR(close("endset"));
    return n;
  }

  Result<std::unique_ptr<Node>> parse_macro() {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kMacro;
    n->name = next().text;
    if (!accept("(")) return syntax_error(line_, "expected '(' after macro name");
    while (!accept(")")) {
      n->params.push_back(next().text);
      if (accept("=")) {
        CACHET_ASSIGN_OR_RETURN(auto d, expression());
        n->defaults.push_back(std::move(d));
      } else if (!n->defaults.empty()) {
        return syntax_error(line_, "a macro parameter without default follows one with a default");
      }
      accept(",");
      if (peek().kind == Token::Kind::kEnd) return syntax_error(line_, "unterminated macro parameters");
    }
    CACHET_RETURN_IF_ERROR(expect_end());
    n->branches.emplace_back();
    CACHET_RETURN_IF_ERROR(parse_nodes(&n->branches[0], {"endmacro"}));
    CACHET_RETURN_IF_ERROR(close("endmacro"));
    return n;
  }

  // ---- expressions (jinja2 precedence) ----
  using ExprP = std::unique_ptr<Expr>;

  ExprP make(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    return e;
  }

  Result<ExprP> expression() {
    Nesting nest(this);
    if (nest.too_deep()) return nesting_error();
    return ternary(true);
  }

  Result<ExprP> ternary(bool allow_cond) {
    CACHET_ASSIGN_OR_RETURN(ExprP e, or_expr());
    while (allow_cond && peek_name("if")) {
      next();
      auto c = make(Expr::Kind::kCond);
      c->a = std::move(e);  // value if true
      CACHET_ASSIGN_OR_RETURN(c->b, or_expr());  // condition
      if (accept_name("else")) {
        CACHET_ASSIGN_OR_RETURN(c->c, ternary(true));
      }
      CACHET_ASSIGN_OR_RETURN(e, done(std::move(c)));
    }
    return e;
  }

  Result<ExprP> binary_chain(Result<ExprP> (Parser::*sub)(), const std::vector<std::string>& ops, bool names) {
    CACHET_ASSIGN_OR_RETURN(ExprP e, (this->*sub)());
    for (;;) {
      std::string op;
      for (const auto& o : ops)
        if (names ? peek_name(o) : peek_op(o)) op = o;
      if (op.empty()) return e;
      next();
      auto b = make(Expr::Kind::kBinary);
      b->name = op;
      b->a = std::move(e);
      CACHET_ASSIGN_OR_RETURN(b->b, (this->*sub)());
      CACHET_ASSIGN_OR_RETURN(e, done(std::move(b)));
    }
  }

  Result<ExprP> or_expr() { return binary_chain(&Parser::and_expr, {"or"}, true); }
  Result<ExprP> and_expr() { return binary_chain(&Parser::not_expr, {"and"}, true); }
  Result<ExprP> not_expr() {
    if (peek_name("not")) {
      Nesting nest(this);
      if (nest.too_deep()) return nesting_error();
      next();
      auto u = make(Expr::Kind::kUnary);
      u->name = "not";
      CACHET_ASSIGN_OR_RETURN(u->a, not_expr());
      return done(std::move(u));
    }
    return compare();
  }
  Result<ExprP> compare() {
    CACHET_ASSIGN_OR_RETURN(ExprP e, math1());
    for (;;) {
      std::string op;
      for (const char* o : {"==", "!=", "<=", ">=", "<", ">"})
        if (peek_op(o)) op = o;
      if (op.empty() && peek_name("in")) op = "in";
      if (op.empty() && peek_name("not") && t_ + 1 < toks_->size() && (*toks_)[t_ + 1].text == "in") {
        next();
        op = "not in";
      }
      if (op.empty()) return e;
      next();
      auto b = make(Expr::Kind::kBinary);
      b->name = op;
      b->a = std::move(e);
      CACHET_ASSIGN_OR_RETURN(b->b, math1());
      CACHET_ASSIGN_OR_RETURN(e, done(std::move(b)));
    }
  }
  Result<ExprP> math1() { return binary_chain(&Parser::concat, {"+", "-"}, false); }
  Result<ExprP> concat() { return binary_chain(&Parser::math2, {"~"}, false); }
  Result<ExprP> math2() { return binary_chain(&Parser::power, {"*", "/", "//", "%"}, false); }
  Result<ExprP> power() { return binary_chain(&Parser::unary, {"**"}, false); }
  Result<ExprP> unary() {
    if (peek_op("-") || peek_op("+")) {
      Nesting nest(this);
      if (nest.too_deep()) return nesting_error();
      auto u = make(Expr::Kind::kUnary);
      u->name = next().text;
      CACHET_ASSIGN_OR_RETURN(u->a, unary());
      return done(std::move(u));
    }
    CACHET_ASSIGN_OR_RETURN(ExprP e, primary());
    CACHET_ASSIGN_OR_RETURN(e, postfix(std::move(e)));
    return filters_and_tests(std::move(e));
  }

  Result<ExprP> primary() {
    const Token t = next();
    switch (t.kind) {
      case Token::Kind::kString: {
        std::string v = t.text;
        while (peek().kind == Token::Kind::kString) v += next().text;  // adjacent literals concatenate
        auto e = make(Expr::Kind::kLiteral);
        e->literal = Value(v);
        return e;
      }
      case Token::Kind::kInt: {
        auto e = make(Expr::Kind::kLiteral);
        e->literal = Value(t.i);
        return e;
      }
      case Token::Kind::kFloat: {
        auto e = make(Expr::Kind::kLiteral);
        e->literal = Value(t.f);
        return e;
      }
      case Token::Kind::kName: {
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          auto e = make(Expr::Kind::kLiteral);
          e->literal = Value(t.text == "true" || t.text == "True");
          return e;
        }
        if (t.text == "none" || t.text == "None") {
          auto e = make(Expr::Kind::kLiteral);
          e->literal = Value::none();
          return e;
        }
        auto e = make(Expr::Kind::kName);
        e->name = t.text;
        return e;
      }
      case Token::Kind::kOp:
        if (t.text == "(") {
          CACHET_ASSIGN_OR_RETURN(ExprP e, expression());
          if (accept(",")) {  // a tuple: a list for our purposes
            auto l = make(Expr::Kind::kList);
            l->items.push_back(std::move(e));
            while (!peek_op(")")) {
              CACHET_ASSIGN_OR_RETURN(auto x, expression());
              l->items.push_back(std::move(x));
              if (!accept(",")) break;
            }
            CACHET_ASSIGN_OR_RETURN(e, done(std::move(l)));
          }
          if (!accept(")")) return syntax_error(line_, "expected ')'");
          return e;
        }
        if (t.text == "[") {
          auto l = make(Expr::Kind::kList);
          while (!accept("]")) {
            CACHET_ASSIGN_OR_RETURN(auto x, expression());
            l->items.push_back(std::move(x));
            if (!accept(",") && !peek_op("]")) return syntax_error(line_, "expected ',' or ']' in a list");
          }
          return done(std::move(l));
        }
        if (t.text == "{") {
          auto d = make(Expr::Kind::kDict);
          while (!accept("}")) {
            CACHET_ASSIGN_OR_RETURN(auto k, expression());
            if (!accept(":")) return syntax_error(line_, "expected ':' in a dict literal");
            CACHET_ASSIGN_OR_RETURN(auto v, expression());
            d->items.push_back(std::move(k));
            d->items.push_back(std::move(v));
            if (!accept(",") && !peek_op("}")) return syntax_error(line_, "expected ',' or '}' in a dict");
          }
          return done(std::move(d));
        }
        return syntax_error(line_, "unexpected '" + t.text + "'");
      case Token::Kind::kEnd:
        return syntax_error(line_, "unexpected end of expression");
    }
    return syntax_error(line_, "bad expression");
  }

  Status call_args(Expr* e) {
    // Positional arguments first, then keyword ones (name=value).
    while (!accept(")")) {
      if (peek().kind == Token::Kind::kName && t_ + 1 < toks_->size() && (*toks_)[t_ + 1].text == "=") {
        e->kw_names.push_back(next().text);
        next();
      } else if (!e->kw_names.empty()) {
        return syntax_error(line_, "a positional argument follows a keyword argument");
      }
      CACHET_ASSIGN_OR_RETURN(auto x, expression());
      e->items.push_back(std::move(x));
      if (!accept(",") && !peek_op(")")) return syntax_error(line_, "expected ',' or ')' in a call");
    }
    return Status::ok();
  }

  Result<ExprP> postfix(ExprP e) {
    for (;;) {
      if (accept(".")) {
        auto a = make(Expr::Kind::kAttr);
        a->name = next().text;
        a->a = std::move(e);
        CACHET_ASSIGN_OR_RETURN(e, done(std::move(a)));
      } else if (accept("[")) {
        ExprP start, stop, step;
        bool slice = false;
        if (!peek_op(":")) {
          CACHET_ASSIGN_OR_RETURN(start, expression());
        }
        if (accept(":")) {
          slice = true;
          if (!peek_op(":") && !peek_op("]")) {
            CACHET_ASSIGN_OR_RETURN(stop, expression());
          }
          if (accept(":") && !peek_op("]")) {
            CACHET_ASSIGN_OR_RETURN(step, expression());
          }
        }
        if (!accept("]")) return syntax_error(line_, "expected ']'");
        auto x = make(slice ? Expr::Kind::kSlice : Expr::Kind::kIndex);
        x->a = std::move(e);
        if (slice) {
          x->items.push_back(std::move(start));
          x->items.push_back(std::move(stop));
          x->items.push_back(std::move(step));
        } else {
          x->b = std::move(start);
        }
        CACHET_ASSIGN_OR_RETURN(e, done(std::move(x)));
      } else if (accept("(")) {
        auto c = make(Expr::Kind::kCall);
        c->a = std::move(e);
        CACHET_RETURN_IF_ERROR(call_args(c.get()));
        CACHET_ASSIGN_OR_RETURN(e, done(std::move(c)));
      } else {
        return e;
      }
    }
  }

  Result<ExprP> filters_and_tests(ExprP e) {
    for (;;) {
      if (accept("|")) {
        auto f = make(Expr::Kind::kFilter);
        f->name = next().text;
        f->a = std::move(e);
        if (accept("(")) CACHET_RETURN_IF_ERROR(call_args(f.get()));
        CACHET_ASSIGN_OR_RETURN(e, done(std::move(f)));
      } else if (peek_name("is")) {
        next();
        auto t = make(Expr::Kind::kTest);
        t->negated = accept_name("not");
        t->name = next().text;
        t->a = std::move(e);
        if (accept("(")) {
          CACHET_RETURN_IF_ERROR(call_args(t.get()));
        } else if (peek().kind == Token::Kind::kString || peek().kind == Token::Kind::kInt ||
                   (peek().kind == Token::Kind::kName && !peek_name("and") && !peek_name("or") &&
                    !peek_name("else") && !peek_name("if"))) {
          CACHET_ASSIGN_OR_RETURN(auto arg, primary());  // "is divisibleby 3", "is sameas none"
          t->items.push_back(std::move(arg));
        }
        CACHET_ASSIGN_OR_RETURN(e, done(std::move(t)));
      } else {
        return e;
      }
    }
  }

  // ---- token helpers ----
  const Token& peek() const {
    static const Token kEnd{Token::Kind::kEnd, ""};
    return t_ < toks_->size() ? (*toks_)[t_] : kEnd;
  }
  Token next() {
    Token t = peek();
    if (t_ < toks_->size()) ++t_;
    return t;
  }
  bool peek_op(const std::string& op) const { return peek().kind == Token::Kind::kOp && peek().text == op; }
  bool peek_name(const std::string& n) const { return peek().kind == Token::Kind::kName && peek().text == n; }
  bool accept(const std::string& op) {
    if (!peek_op(op)) return false;
    ++t_;
    return true;
  }
  bool accept_name(const std::string& n) {
    if (!peek_name(n)) return false;
    ++t_;
    return true;
  }
  Status expect_end() {
    if (t_ < toks_->size()) return syntax_error(line_, "unexpected '" + (*toks_)[t_].text + "'");
    return Status::ok();
  }

  // Nesting of the recursive descent (blocks, parentheses, unary operators): past the limit, an error
  // before the stack runs out.
  struct Nesting {
    Parser* p;
    explicit Nesting(Parser* parser) : p(parser) { ++p->nesting_; }
    ~Nesting() { --p->nesting_; }
    bool too_deep() const { return p->nesting_ > Limits::kMaxParseNesting; }
  };
  Status nesting_error() const {
    return syntax_error(line_, "nested deeper than " + std::to_string(Limits::kMaxParseNesting) + " levels");
  }
  // Finishes a node: its depth from its children's, an error past the limit (operator and filter chains are
  // built by loops, not recursion, so this is where their depth is bounded).
  Result<ExprP> done(ExprP e) {
    int d = 0;
    for (const Expr* c : {e->a.get(), e->b.get(), e->c.get()})
      if (c) d = std::max(d, c->depth);
    for (const auto& c : e->items)
      if (c) d = std::max(d, c->depth);
    e->depth = d + 1;
    if (e->depth > Limits::kMaxExprDepth)
      return syntax_error(line_, "expression nested deeper than " + std::to_string(Limits::kMaxExprDepth) + " levels");
    return e;
  }

  int nesting_ = 0;
  std::vector<Piece> pieces_;
  size_t i_ = 0;
  const std::vector<Token>* toks_ = nullptr;
  size_t t_ = 0;
  int line_ = 1;
};

}  // namespace

Result<Body> parse_template(const std::string& source) {
  CACHET_ASSIGN_OR_RETURN(auto pieces, lex(source));
  Parser p(std::move(pieces));
  return p.parse_all();
}

}  // namespace cachet::jinja
