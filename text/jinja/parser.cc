#include "text/jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "text/jinja/error.h"
#include "text/jinja/lexer.h"

namespace strata::text::jinja {
namespace {

ExprPtr MakeExpr(Expr::Kind kind, int line, std::string name = "") {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  e->name = std::move(name);
  return e;
}

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, int line) : t_(std::move(tokens)), line_(line) {}

  absl::StatusOr<ExprPtr> Parse() { return Ternary(); }
  const Token& Peek(size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  bool AtEnd() const { return Peek().kind == Token::Kind::kEnd; }
  bool IsName(std::string_view n, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kName && Peek(ahead).text == n;
  }
  bool IsOp(std::string_view o) const { return Peek().kind == Token::Kind::kOp && Peek().text == o; }
  Token Next() { Token t = Peek(); if (pos_ < t_.size() - 1) ++pos_; return t; }
  absl::Status Expect(std::string_view op) {
    if (!IsOp(op)) return Error(absl::StrCat("expected '", std::string(op), "'"));
    Next();
    return absl::OkStatus();
  }
  absl::Status Error(std::string_view what) const {
    std::string near = Peek().kind == Token::Kind::kEnd ? "end of tag" : "'" + Peek().text + "'";
    return TemplateError(line_, absl::StrCat(std::string(what), " near ", near));
  }

 private:
  absl::StatusOr<ExprPtr> Ternary() {
    STRATA_ASSIGN_OR_RETURN(ExprPtr value, Or());
    if (!IsName("if")) return value;
    Next();
    STRATA_ASSIGN_OR_RETURN(ExprPtr cond, Or());
    auto e = MakeExpr(Expr::Kind::kTernary, line_);
    e->args.push_back(std::move(cond));
    e->args.push_back(std::move(value));
    if (IsName("else")) {
      Next();
      STRATA_ASSIGN_OR_RETURN(ExprPtr other, Ternary());
      e->args.push_back(std::move(other));
    } else {
      e->args.push_back(nullptr);
    }
    return e;
  }
  absl::StatusOr<ExprPtr> Or() {
    STRATA_ASSIGN_OR_RETURN(ExprPtr left, And());
    while (IsName("or")) {
      Next();
      STRATA_ASSIGN_OR_RETURN(ExprPtr right, And());
      left = Pair(Expr::Kind::kOr, "or", std::move(left), std::move(right));
    }
    return left;
  }
  absl::StatusOr<ExprPtr> And() {
    STRATA_ASSIGN_OR_RETURN(ExprPtr left, Not());
    while (IsName("and")) {
      Next();
      STRATA_ASSIGN_OR_RETURN(ExprPtr right, Not());
      left = Pair(Expr::Kind::kAnd, "and", std::move(left), std::move(right));
    }
    return left;
  }
  absl::StatusOr<ExprPtr> Not() {
    if (IsName("not")) {
      Next();
      STRATA_ASSIGN_OR_RETURN(ExprPtr operand, Not());
      auto e = MakeExpr(Expr::Kind::kNot, line_);
      e->args.push_back(std::move(operand));
      return e;
    }
    return Compare();
  }
  absl::StatusOr<ExprPtr> Compare() {
    STRATA_ASSIGN_OR_RETURN(ExprPtr left, Math1());
    for (;;) {
      std::string op;
      if (Peek().kind == Token::Kind::kOp &&
          (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">="))) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "not in";
      } else {
        return left;
      }
      STRATA_ASSIGN_OR_RETURN(ExprPtr right, Math1());
      left = Pair(Expr::Kind::kBinary, op, std::move(left), std::move(right));
    }
  }
  absl::StatusOr<ExprPtr> Math1() {
    STRATA_ASSIGN_OR_RETURN(ExprPtr left, Concat());
    while (IsOp("+") || IsOp("-")) {
      std::string op = Next().text;
      STRATA_ASSIGN_OR_RETURN(ExprPtr right, Concat());
      left = Pair(Expr::Kind::kBinary, op, std::move(left), std::move(right));
    }
    return left;
  }
  absl::StatusOr<ExprPtr> Concat() {
    STRATA_ASSIGN_OR_RETURN(ExprPtr left, Math2());
    while (IsOp("~")) {
      Next();
      STRATA_ASSIGN_OR_RETURN(ExprPtr right, Math2());
      left = Pair(Expr::Kind::kBinary, "~", std::move(left), std::move(right));
    }
    return left;
  }
  absl::StatusOr<ExprPtr> Math2() {
    STRATA_ASSIGN_OR_RETURN(ExprPtr left, Unary());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      std::string op = Next().text;
      STRATA_ASSIGN_OR_RETURN(ExprPtr right, Unary());
      left = Pair(Expr::Kind::kBinary, op, std::move(left), std::move(right));
    }
    return left;
  }
  absl::StatusOr<ExprPtr> Unary() {
    if (IsOp("-")) {
      Next();
      STRATA_ASSIGN_OR_RETURN(ExprPtr operand, Unary());
      auto e = MakeExpr(Expr::Kind::kNeg, line_);
      e->args.push_back(std::move(operand));
      return e;
    }
    if (IsOp("**")) return Error("'**' is not supported");
    STRATA_ASSIGN_OR_RETURN(ExprPtr e, Postfix());
    // Filters and tests bind tighter than any operator: `'a' + x | trim` trims x.
    for (;;) {
      if (IsOp("|")) {
        Next();
        if (Peek().kind != Token::Kind::kName) return Error("expected a filter name");
        auto f = MakeExpr(Expr::Kind::kFilter, line_, Next().text);
        f->args.push_back(std::move(e));
        if (IsOp("(")) STRATA_RETURN_IF_ERROR(CallArgs(*f));
        e = std::move(f);
      } else if (IsName("is")) {
        Next();
        auto t = MakeExpr(Expr::Kind::kTest, line_);
        if (IsName("not")) {
          Next();
          t->negated = true;
        }
        if (Peek().kind != Token::Kind::kName) return Error("expected a test name");
        t->name = Next().text;
        t->args.push_back(std::move(e));
        if (IsOp("(")) {
          STRATA_RETURN_IF_ERROR(CallArgs(*t));
        } else if (Peek().kind == Token::Kind::kString || Peek().kind == Token::Kind::kInt) {
          STRATA_ASSIGN_OR_RETURN(ExprPtr arg, Postfix());
          t->args.push_back(std::move(arg));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }
  absl::StatusOr<ExprPtr> Postfix() {
    STRATA_ASSIGN_OR_RETURN(ExprPtr e, Primary());
    for (;;) {
      if (IsOp(".")) {
        Next();
        if (Peek().kind != Token::Kind::kName && Peek().kind != Token::Kind::kInt) return Error("expected an attribute");
        Token a = Next();
        auto g = MakeExpr(a.kind == Token::Kind::kInt ? Expr::Kind::kItem : Expr::Kind::kAttr, line_, a.text);
        g->args.push_back(std::move(e));
        if (a.kind == Token::Kind::kInt) {
          auto idx = MakeExpr(Expr::Kind::kLiteral, line_);
          idx->literal = Value::Int(a.i);
          g->args.push_back(std::move(idx));
        }
        e = std::move(g);
      } else if (IsOp("[")) {
        Next();
        std::vector<ExprPtr> parts(1);
        bool slice = false;
        for (;;) {
          if (IsOp(":")) {
            Next();
            slice = true;
            parts.emplace_back();
            if (parts.size() > 3) return Error("a slice has at most three parts");
            continue;
          }
          if (IsOp("]")) break;
          if (parts.back() != nullptr) return Error("expected ']'");
          STRATA_ASSIGN_OR_RETURN(parts.back(), Ternary());
        }
        Next();
        auto g = MakeExpr(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, line_);
        if (!slice && parts[0] == nullptr) return Error("empty subscript");
        g->args.push_back(std::move(e));
        for (ExprPtr& p : parts) g->args.push_back(std::move(p));
        e = std::move(g);
      } else if (IsOp("(")) {
        auto c = MakeExpr(Expr::Kind::kCall, line_);
        c->args.push_back(std::move(e));
        STRATA_RETURN_IF_ERROR(CallArgs(*c));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  absl::Status CallArgs(Expr& call) {
    STRATA_RETURN_IF_ERROR(Expect("("));
    while (!IsOp(")")) {
      if (Peek().kind == Token::Kind::kName && Peek(1).kind == Token::Kind::kOp && Peek(1).text == "=") {
        std::string key = Next().text;
        Next();
        STRATA_ASSIGN_OR_RETURN(ExprPtr v, Ternary());
        call.kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        STRATA_ASSIGN_OR_RETURN(ExprPtr v, Ternary());
        call.args.push_back(std::move(v));
      }
      if (!IsOp(",")) break;
      Next();
    }
    return Expect(")");
  }
  absl::StatusOr<ExprPtr> Primary() {
    Token t = Peek();
    switch (t.kind) {
      case Token::Kind::kString: {
        Next();
        std::string s = t.text;
        while (Peek().kind == Token::Kind::kString) s += Next().text;  // 'a' 'b' is 'ab'
        auto e = MakeExpr(Expr::Kind::kLiteral, line_);
        e->literal = Value::Str(std::move(s));
        return e;
      }
      case Token::Kind::kInt: case Token::Kind::kFloat: {
        Next();
        auto e = MakeExpr(Expr::Kind::kLiteral, line_);
        e->literal = t.kind == Token::Kind::kInt ? Value::Int(t.i) : Value::Float(t.f);
        return e;
      }
      case Token::Kind::kName: {
        Next();
        auto e = MakeExpr(Expr::Kind::kLiteral, line_);
        if (t.text == "true" || t.text == "True") e->literal = Value::Bool(true);
        else if (t.text == "false" || t.text == "False") e->literal = Value::Bool(false);
        else if (t.text == "none" || t.text == "None") e->literal = Value::None();
        else e = MakeExpr(Expr::Kind::kName, line_, t.text);
        return e;
      }
      case Token::Kind::kOp:
        if (t.text == "(") {
          Next();
          STRATA_ASSIGN_OR_RETURN(ExprPtr e, Ternary());
          if (IsOp(",")) return Error("tuples are not supported");
          STRATA_RETURN_IF_ERROR(Expect(")"));
          return e;
        }
        if (t.text == "[" || t.text == "{") {
          Next();
          const bool dict = t.text == "{";
          auto e = MakeExpr(dict ? Expr::Kind::kDict : Expr::Kind::kList, line_);
          const std::string close = dict ? "}" : "]";
          while (!IsOp(close)) {
            STRATA_ASSIGN_OR_RETURN(ExprPtr item, Ternary());
            e->args.push_back(std::move(item));
            if (dict) {
              STRATA_RETURN_IF_ERROR(Expect(":"));
              STRATA_ASSIGN_OR_RETURN(ExprPtr v, Ternary());
              e->args.push_back(std::move(v));
            }
            if (!IsOp(",")) break;
            Next();
          }
          STRATA_RETURN_IF_ERROR(Expect(close));
          return e;
        }
        break;
      case Token::Kind::kEnd: break;
    }
    return Error("expected an expression");
  }
  ExprPtr Pair(Expr::Kind kind, std::string op, ExprPtr a, ExprPtr b) {
    auto e = MakeExpr(kind, line_, std::move(op));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int line_;
};

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Chunk> chunks) : chunks_(std::move(chunks)) {}

  // Parses chunks into `block` until a statement whose keyword is in `ends`; returns
  // that keyword ("" at the end of the template) and leaves its parser in `end_`.
  absl::StatusOr<std::string> Body(Node& block, std::initializer_list<std::string_view> ends) {
    while (pos_ < chunks_.size()) {
      const Chunk& c = chunks_[pos_++];
      if (c.kind == Chunk::Kind::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->text = c.text;
        block.children.push_back(std::move(n));
        continue;
      }
      STRATA_ASSIGN_OR_RETURN(std::vector<Token> tokens, LexExpression(c.text, c.line));
      auto p = std::make_unique<ExprParser>(std::move(tokens), c.line);
      if (c.kind == Chunk::Kind::kExpr) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = c.line;
        STRATA_ASSIGN_OR_RETURN(ExprPtr e, p->Parse());
        if (!p->AtEnd()) return p->Error("unexpected token");
        n->exprs.push_back(std::move(e));
        block.children.push_back(std::move(n));
        continue;
      }
      if (p->Peek().kind != Token::Kind::kName) return p->Error("expected a statement");
      const std::string keyword = p->Next().text;
      if (std::find(ends.begin(), ends.end(), keyword) != ends.end()) {
        end_ = std::move(p);
        return keyword;
      }
      if (keyword == "generation" || keyword == "endgeneration") continue;  // assistant-mask markers
      NodePtr n;
      if (keyword == "if") {
        STRATA_ASSIGN_OR_RETURN(n, If(*p, c.line));
      } else if (keyword == "for") {
        STRATA_ASSIGN_OR_RETURN(n, For(*p, c.line));
      } else if (keyword == "set") {
        STRATA_ASSIGN_OR_RETURN(n, Set(*p, c.line));
      } else if (keyword == "break" || keyword == "continue") {
        n = std::make_unique<Node>();
        n->kind = keyword == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
        n->line = c.line;
      } else {
        return TemplateError(c.line, absl::StrCat("unsupported statement '", keyword, "'"));
      }
      if (!p->AtEnd() && n->kind != Node::Kind::kIf && n->kind != Node::Kind::kFor) return p->Error("unexpected token");
      block.children.push_back(std::move(n));
    }
    if (ends.size() > 0) {
      return TemplateError(chunks_.empty() ? 1 : chunks_.back().line,
                      absl::StrCat("missing '{% ", std::string(*std::prev(ends.end())), " %}'"));
    }
    return std::string();
  }

 private:
  absl::StatusOr<NodePtr> If(ExprParser& p, int line) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kIf;
    n->line = line;
    ExprParser* cond = &p;
    for (;;) {
      STRATA_ASSIGN_OR_RETURN(ExprPtr e, cond->Parse());
      if (!cond->AtEnd()) return cond->Error("unexpected token");
      n->exprs.push_back(std::move(e));
      auto body = std::make_unique<Node>();
      STRATA_ASSIGN_OR_RETURN(std::string end, Body(*body, {"elif", "else", "endif"}));
      n->children.push_back(std::move(body));
      holder_.push_back(std::move(end_));
      cond = holder_.back().get();
      if (end == "elif") continue;
      if (end == "else") {
        auto other = std::make_unique<Node>();
        STRATA_ASSIGN_OR_RETURN(std::string close, Body(*other, {"endif"}));
        n->children.push_back(std::move(other));
      }
      return n;
    }
  }
  absl::StatusOr<NodePtr> For(ExprParser& p, int line) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kFor;
    n->line = line;
    for (;;) {
      if (p.Peek().kind != Token::Kind::kName) return p.Error("expected a loop variable");
      n->targets.push_back(p.Next().text);
      if (!p.IsOp(",")) break;
      p.Next();
    }
    if (!p.IsName("in")) return p.Error("expected 'in'");
    p.Next();
    // The iterable stops before a trailing `if` filter (not a ternary).
    STRATA_ASSIGN_OR_RETURN(ExprPtr iterable, p.Parse());
    if (iterable->kind == Expr::Kind::kTernary && iterable->args[2] == nullptr) {
      n->exprs.push_back(std::move(iterable->args[1]));
      n->exprs.push_back(std::move(iterable->args[0]));
    } else {
      n->exprs.push_back(std::move(iterable));
      n->exprs.push_back(nullptr);
    }
    if (p.IsName("recursive")) return p.Error("recursive loops are not supported");
    if (!p.AtEnd()) return p.Error("unexpected token");
    auto body = std::make_unique<Node>();
    STRATA_ASSIGN_OR_RETURN(std::string end, Body(*body, {"else", "endfor"}));
    n->children.push_back(std::move(body));
    if (end == "else") {
      auto other = std::make_unique<Node>();
      STRATA_ASSIGN_OR_RETURN(std::string close, Body(*other, {"endfor"}));
      n->children.push_back(std::move(other));
    }
    return n;
  }
  absl::StatusOr<NodePtr> Set(ExprParser& p, int line) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kSet;
    n->line = line;
    if (p.Peek().kind != Token::Kind::kName) return p.Error("expected a name to set");
    n->targets.push_back(p.Next().text);
    if (p.IsOp(".")) {
      p.Next();
      if (p.Peek().kind != Token::Kind::kName) return p.Error("expected an attribute to set");
      n->targets.push_back(p.Next().text);
    }
    if (!p.IsOp("=")) return p.Error("only '{% set name = value %}' is supported");
    p.Next();
    STRATA_ASSIGN_OR_RETURN(ExprPtr value, p.Parse());
    n->exprs.push_back(std::move(value));
    return n;
  }

  std::vector<Chunk> chunks_;
  size_t pos_ = 0;
  std::unique_ptr<ExprParser> end_;
  std::vector<std::unique_ptr<ExprParser>> holder_;
};

}  // namespace

absl::StatusOr<Node> Parse(std::string_view source) {
  STRATA_ASSIGN_OR_RETURN(std::vector<Chunk> chunks, Scan(std::string(source)));
  TemplateParser parser(std::move(chunks));
  Node root;
  STRATA_ASSIGN_OR_RETURN(std::string end, parser.Body(root, {}));
  return root;
}

}  // namespace strata::text::jinja
