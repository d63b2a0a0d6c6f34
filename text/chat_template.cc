#include "text/chat_template.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace strata::text {
namespace {

// ---------------------------------------------------------------- values

struct Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // insertion order, like Python
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Callable = std::function<absl::StatusOr<Value>(const Args&, const Kwargs&)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<ValueList> list;
  std::shared_ptr<ValueDict> dict;  // shared: a namespace is changed in place by `set ns.x`
  std::shared_ptr<const Callable> fn;
  bool is_namespace = false;

  static Value None() { Value v; v.kind = Kind::kNone; return v; }
  static Value Bool(bool x) { Value v; v.kind = Kind::kBool; v.b = x; return v; }
  static Value Int(int64_t x) { Value v; v.kind = Kind::kInt; v.i = x; return v; }
  static Value Float(double x) { Value v; v.kind = Kind::kFloat; v.f = x; return v; }
  static Value Str(std::string x) { Value v; v.kind = Kind::kString; v.s = std::move(x); return v; }
  static Value List(ValueList x) {
    Value v; v.kind = Kind::kList; v.list = std::make_shared<ValueList>(std::move(x)); return v;
  }
  static Value Dict(ValueDict x) {
    Value v; v.kind = Kind::kDict; v.dict = std::make_shared<ValueDict>(std::move(x)); return v;
  }
  static Value Function(Callable c) {
    Value v; v.kind = Kind::kFunction; v.fn = std::make_shared<const Callable>(std::move(c)); return v;
  }
  bool numeric() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  double number() const { return kind == Kind::kFloat ? f : kind == Kind::kBool ? (b ? 1 : 0) : static_cast<double>(i); }
  const Value* Find(std::string_view key) const {
    if (kind != Kind::kDict) return nullptr;
    for (const auto& [k, v] : *dict) if (k == key) return &v;
    return nullptr;
  }
};

const char* KindName(Value::Kind k) {
  switch (k) {
    case Value::Kind::kUndefined: return "undefined";
    case Value::Kind::kNone: return "none";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "string";
    case Value::Kind::kList: return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kFunction: return "function";
  }
  return "?";
}

bool Truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.b;
    case Value::Kind::kInt: return v.i != 0;
    case Value::Kind::kFloat: return v.f != 0;
    case Value::Kind::kString: return !v.s.empty();
    case Value::Kind::kList: return !v.list->empty();
    case Value::Kind::kDict: return !v.dict->empty();
    case Value::Kind::kFunction: return true;
  }
  return false;
}

std::string FloatText(double x) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (std::isnan(x)) return "nan";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), x);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string Repr(const Value& v);

// What `{{ v }}` prints (Python's str()).
std::string Str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.b ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.i);
    case Value::Kind::kFloat: return FloatText(v.f);
    case Value::Kind::kString: return v.s;
    default: return Repr(v);
  }
}

std::string Repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString: {
      std::string out = "'";
      for (char c : v.s) {
        if (c == '\'' || c == '\\') out.push_back('\\');
        if (c == '\n') { out += "\\n"; continue; }
        out.push_back(c);
      }
      return out + "'";
    }
    case Value::Kind::kList: {
      std::vector<std::string> parts;
      for (const Value& x : *v.list) parts.push_back(Repr(x));
      return "[" + absl::StrJoin(parts, ", ") + "]";
    }
    case Value::Kind::kDict: {
      std::vector<std::string> parts;
      for (const auto& [k, x] : *v.dict) parts.push_back(Repr(Value::Str(k)) + ": " + Repr(x));
      return "{" + absl::StrJoin(parts, ", ") + "}";
    }
    case Value::Kind::kFunction: return "<function>";
    default: return Str(v);
  }
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out + "\"";
}

// `tojson` as transformers defines it: json.dumps(ensure_ascii=False), ", " and ": ".
absl::StatusOr<std::string> ToJson(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kNone: case Value::Kind::kUndefined: return std::string("null");
    case Value::Kind::kBool: return std::string(v.b ? "true" : "false");
    case Value::Kind::kInt: return std::to_string(v.i);
    case Value::Kind::kFloat: return FloatText(v.f);
    case Value::Kind::kString: return JsonString(v.s);
    case Value::Kind::kList: {
      std::vector<std::string> parts;
      for (const Value& x : *v.list) {
        STRATA_ASSIGN_OR_RETURN(std::string j, ToJson(x));
        parts.push_back(std::move(j));
      }
      return "[" + absl::StrJoin(parts, ", ") + "]";
    }
    case Value::Kind::kDict: {
      std::vector<std::string> parts;
      for (const auto& [k, x] : *v.dict) {
        STRATA_ASSIGN_OR_RETURN(std::string j, ToJson(x));
        parts.push_back(JsonString(k) + ": " + j);
      }
      return "{" + absl::StrJoin(parts, ", ") + "}";
    }
    case Value::Kind::kFunction: break;
  }
  return absl::InvalidArgumentError("tojson of a function");
}

bool Equal(const Value& a, const Value& b) {
  if (a.numeric() && b.numeric()) return a.number() == b.number();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined: case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.s == b.s;
    case Value::Kind::kList:
      return std::equal(a.list->begin(), a.list->end(), b.list->begin(), b.list->end(), Equal);
    case Value::Kind::kDict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, x] : *a.dict) {
        const Value* y = b.Find(k);
        if (y == nullptr || !Equal(x, *y)) return false;
      }
      return true;
    default: return a.fn == b.fn;
  }
}

std::string_view Trim(std::string_view s, std::string_view chars, bool left, bool right) {
  if (left) {
    size_t b = s.find_first_not_of(chars);
    s = b == std::string_view::npos ? std::string_view() : s.substr(b);
  }
  if (right) {
    size_t e = s.find_last_not_of(chars);
    s = e == std::string_view::npos ? std::string_view() : s.substr(0, e + 1);
  }
  return s;
}
constexpr std::string_view kSpace = " \t\n\r\f\v";

std::string Upper(std::string s) {
  for (char& c : s) if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}
std::string Lower(std::string s) {
  for (char& c : s) if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

std::string ReplaceAll(std::string s, std::string_view from, std::string_view to) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, pos)) {
    out.append(s, pos, at - pos);
    out.append(to);
    pos = at + from.size();
  }
  out.append(s, pos);
  return out;
}

// ---------------------------------------------------------------- lexing

struct Token {
  enum class Kind { kName, kString, kInt, kFloat, kOp, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // name, operator, or the string literal's value
  int64_t i = 0;
  double f = 0;
};

absl::Status LexError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", what));
}

absl::StatusOr<std::vector<Token>> LexExpression(std::string_view s, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (kSpace.find(c) != std::string_view::npos) { ++i; continue; }
    Token t;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = i;
      while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
      t.kind = Token::Kind::kName;
      t.text = std::string(s.substr(b, i - b));
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t b = i;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      bool is_float = i + 1 < s.size() && s[i] == '.' && std::isdigit(static_cast<unsigned char>(s[i + 1]));
      if (is_float) {
        ++i;
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
        t.kind = Token::Kind::kFloat;
        t.f = std::strtod(std::string(s.substr(b, i - b)).c_str(), nullptr);
      } else {
        t.kind = Token::Kind::kInt;
        auto r = std::from_chars(s.data() + b, s.data() + i, t.i);
        if (r.ec != std::errc()) return LexError(line, "integer literal out of range");
      }
    } else if (c == '\'' || c == '"') {
      ++i;
      t.kind = Token::Kind::kString;
      for (;;) {
        if (i >= s.size()) return LexError(line, "unterminated string literal");
        char d = s[i++];
        if (d == c) break;
        if (d != '\\' || i >= s.size()) { t.text.push_back(d); continue; }
        char e = s[i++];
        switch (e) {
          case 'n': t.text.push_back('\n'); break;
          case 't': t.text.push_back('\t'); break;
          case 'r': t.text.push_back('\r'); break;
          case 'b': t.text.push_back('\b'); break;
          case 'f': t.text.push_back('\f'); break;
          case 'v': t.text.push_back('\v'); break;
          case '\\': case '\'': case '"': t.text.push_back(e); break;
          default: t.text.push_back('\\'); t.text.push_back(e);
        }
      }
    } else {
      static constexpr std::string_view kTwo[] = {"==", "!=", "<=", ">=", "//", "**"};
      t.kind = Token::Kind::kOp;
      for (std::string_view op : kTwo) {
        if (s.substr(i, 2) == op) t.text = std::string(op);
      }
      if (t.text.empty()) {
        if (std::string_view("()[]{}.,:|+-*/%~<>=").find(c) == std::string_view::npos) {
          return LexError(line, absl::StrCat("unexpected character '", std::string(1, c), "'"));
        }
        t.text = std::string(1, c);
      }
      i += t.text.size();
    }
    out.push_back(std::move(t));
  }
  out.push_back(Token{});
  return out;
}

// ---------------------------------------------------------------- expressions

struct Expr {
  enum class Kind { kLiteral, kName, kAttr, kItem, kSlice, kCall, kFilter, kTest, kNot, kNeg, kBinary, kAnd, kOr,
                    kTernary, kList, kDict };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;  // name, attribute, filter, test, operator
  bool negated = false;  // `is not`
  std::vector<std::unique_ptr<Expr>> args;  // operands; a null entry is an omitted slice bound
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
};
using ExprPtr = std::unique_ptr<Expr>;

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
    return LexError(line_, absl::StrCat(std::string(what), " near ", near));
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

}  // namespace

// ---------------------------------------------------------------- statements

struct ChatTemplate::Node {
  enum class Kind { kBlock, kText, kOutput, kIf, kFor, kSet, kBreak, kContinue };
  Kind kind = Kind::kBlock;
  int line = 0;
  std::string text;                     // kText
  std::vector<std::unique_ptr<Node>> children;  // kBlock; kIf: one body per condition, then else
  std::vector<ExprPtr> exprs;           // kOutput: value; kIf: conditions; kFor: iterable, filter; kSet: value
  std::vector<std::string> targets;     // kFor: loop variables; kSet: name, or namespace + attribute
};

namespace {

using Node = ChatTemplate::Node;
using NodePtr = std::unique_ptr<Node>;

struct Chunk {
  enum class Kind { kText, kExpr, kStmt } kind;
  std::string text;
  int line;
};

// The template as text, expression and statement chunks, with Jinja's whitespace rules
// applied the way transformers configures them (and @huggingface/jinja mirrors).
absl::StatusOr<std::vector<Chunk>> Scan(std::string src) {
  if (!src.empty() && src.back() == '\n') src.pop_back();  // keep_trailing_newline=False
  // lstrip_blocks: spaces and tabs before a block or comment tag at the start of a line.
  std::string lstripped;
  for (size_t i = 0; i < src.size();) {
    size_t j = i;
    while (j < src.size() && (src[j] == ' ' || src[j] == '\t')) ++j;
    bool tag = j + 1 < src.size() && src[j] == '{' && (src[j + 1] == '%' || src[j + 1] == '#' || src[j + 1] == '-');
    size_t eol = src.find('\n', i);
    eol = eol == std::string::npos ? src.size() : eol + 1;
    lstripped.append(src, tag ? j : i, eol - (tag ? j : i));
    i = eol;
  }
  // trim_blocks: the first newline after a block or comment tag.
  std::string trimmed;
  for (size_t i = 0; i < lstripped.size(); ++i) {
    trimmed.push_back(lstripped[i]);
    if (i >= 1 && lstripped[i] == '}' && (lstripped[i - 1] == '%' || lstripped[i - 1] == '#' || lstripped[i - 1] == '-') &&
        i + 1 < lstripped.size() && lstripped[i + 1] == '\n') {
      ++i;
    }
  }
  src = std::move(trimmed);

  std::vector<Chunk> chunks;
  bool strip_next = false;
  int line = 1;
  size_t pos = 0;
  while (pos <= src.size()) {
    size_t at = pos;
    while (at + 1 < src.size() && !(src[at] == '{' && (src[at + 1] == '{' || src[at + 1] == '%' || src[at + 1] == '#'))) ++at;
    if (at + 1 >= src.size()) at = src.size();
    std::string text = src.substr(pos, at - pos);
    if (strip_next) text = std::string(Trim(text, kSpace, true, false));
    const bool tag = at < src.size();
    const char open = tag ? src[at + 1] : 0;
    size_t body = at + 2;
    if (tag && body < src.size() && (src[body] == '-' || src[body] == '+')) {
      if (src[body] == '-') text = std::string(Trim(text, kSpace, false, true));
      ++body;
    }
    if (!text.empty()) chunks.push_back({Chunk::Kind::kText, text, line});
    line += static_cast<int>(std::count(src.begin() + static_cast<long>(pos), src.begin() + static_cast<long>(at), '\n'));
    if (!tag) break;
    const std::string close = open == '{' ? "}}" : open == '%' ? "%}" : "#}";
    size_t end = body;
    char quote = 0;
    for (; end + 1 < src.size(); ++end) {
      char c = src[end];
      if (open != '#' && quote == 0 && (c == '\'' || c == '"')) { quote = c; continue; }
      if (quote != 0) {
        if (c == '\\') ++end;
        else if (c == quote) quote = 0;
        continue;
      }
      if (src.compare(end, 2, close) == 0) break;
    }
    if (end + 1 >= src.size()) return LexError(line, absl::StrCat("unclosed '", std::string(1, '{'), std::string(1, open), "'"));
    size_t content_end = end;
    strip_next = content_end > body && src[content_end - 1] == '-';
    if (strip_next) --content_end;
    std::string content = src.substr(body, content_end - body);
    if (open != '#') {
      chunks.push_back({open == '{' ? Chunk::Kind::kExpr : Chunk::Kind::kStmt, content, line});
    }
    line += static_cast<int>(std::count(src.begin() + static_cast<long>(at), src.begin() + static_cast<long>(end), '\n'));
    pos = end + 2;
  }
  return chunks;
}

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
        return LexError(c.line, absl::StrCat("unsupported statement '", keyword, "'"));
      }
      if (!p->AtEnd() && n->kind != Node::Kind::kIf && n->kind != Node::Kind::kFor) return p->Error("unexpected token");
      block.children.push_back(std::move(n));
    }
    if (ends.size() > 0) {
      return LexError(chunks_.empty() ? 1 : chunks_.back().line,
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

// ---------------------------------------------------------------- rendering

class Renderer {
 public:
  enum class Flow { kNormal, kBreak, kContinue };

  explicit Renderer(std::map<std::string, Value> globals) { scopes_.push_back(std::move(globals)); }

  absl::Status Exec(const Node& n, Flow& flow) {
    switch (n.kind) {
      case Node::Kind::kBlock:
        for (const NodePtr& c : n.children) {
          STRATA_RETURN_IF_ERROR(Exec(*c, flow));
          if (flow != Flow::kNormal) return absl::OkStatus();
        }
        return absl::OkStatus();
      case Node::Kind::kText:
        out_ += n.text;
        return absl::OkStatus();
      case Node::Kind::kOutput: {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*n.exprs[0]));
        out_ += Str(v);
        return absl::OkStatus();
      }
      case Node::Kind::kIf:
        for (size_t i = 0; i < n.exprs.size(); ++i) {
          STRATA_ASSIGN_OR_RETURN(Value c, Eval(*n.exprs[i]));
          if (Truthy(c)) return Exec(*n.children[i], flow);
        }
        if (n.children.size() > n.exprs.size()) return Exec(*n.children.back(), flow);
        return absl::OkStatus();
      case Node::Kind::kFor: return For(n, flow);
      case Node::Kind::kSet: {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*n.exprs[0]));
        if (n.targets.size() == 1) {
          scopes_.back()[n.targets[0]] = std::move(v);
          return absl::OkStatus();
        }
        Value* ns = Lookup(n.targets[0]);
        if (ns == nullptr || !ns->is_namespace) {
          return Error(n.line, absl::StrCat("'", n.targets[0], "' is not a namespace()"));
        }
        for (auto& [k, x] : *ns->dict) {
          if (k == n.targets[1]) {
            x = std::move(v);
            return absl::OkStatus();
          }
        }
        ns->dict->emplace_back(n.targets[1], std::move(v));
        return absl::OkStatus();
      }
      case Node::Kind::kBreak: flow = Flow::kBreak; return absl::OkStatus();
      case Node::Kind::kContinue: flow = Flow::kContinue; return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  std::string& out() { return out_; }

 private:
  static absl::Status Error(int line, absl::string_view what) { return LexError(line, what); }

  Value* Lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return &f->second;
    }
    return nullptr;
  }

  absl::Status For(const Node& n, Flow& outer) {
    STRATA_ASSIGN_OR_RETURN(Value seq, Eval(*n.exprs[0]));
    ValueList items;
    if (seq.kind == Value::Kind::kList) {
      items = *seq.list;
    } else if (seq.kind == Value::Kind::kDict) {
      for (const auto& [k, v] : *seq.dict) items.push_back(Value::Str(k));
    } else if (seq.kind == Value::Kind::kString) {
      for (char c : seq.s) items.push_back(Value::Str(std::string(1, c)));
    } else if (seq.kind != Value::Kind::kUndefined && seq.kind != Value::Kind::kNone) {
      return Error(n.line, absl::StrCat("cannot loop over a ", KindName(seq.kind)));
    }
    if (n.exprs[1] != nullptr) {  // `for x in xs if cond`: filter first, loop.* counts the kept
      ValueList kept;
      for (Value& item : items) {
        scopes_.emplace_back();
        STRATA_RETURN_IF_ERROR(Bind(n, item));
        auto keep = Eval(*n.exprs[1]);
        scopes_.pop_back();
        if (!keep.ok()) return keep.status();
        if (Truthy(*keep)) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (n.children.size() > 1) return Exec(*n.children[1], outer);
      return absl::OkStatus();
    }
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      scopes_.emplace_back();
      absl::Status bound = Bind(n, items[static_cast<size_t>(i)]);
      if (bound.ok()) {
        scopes_.back()["loop"] = Value::Dict({{"index0", Value::Int(i)}, {"index", Value::Int(i + 1)},
                                              {"first", Value::Bool(i == 0)}, {"last", Value::Bool(i == len - 1)},
                                              {"length", Value::Int(len)}, {"revindex", Value::Int(len - i)},
                                              {"revindex0", Value::Int(len - i - 1)},
                                              {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value()},
                                              {"nextitem", i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value()}});
      }
      Flow flow = Flow::kNormal;
      absl::Status s = bound.ok() ? Exec(*n.children[0], flow) : bound;
      scopes_.pop_back();  // `set` inside a loop does not leak out of it (as in Jinja)
      STRATA_RETURN_IF_ERROR(s);
      if (flow == Flow::kBreak) break;
    }
    return absl::OkStatus();
  }

  absl::Status Bind(const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = item;
      return absl::OkStatus();
    }
    if (item.kind != Value::Kind::kList || item.list->size() != n.targets.size()) {
      return Error(n.line, "cannot unpack the loop item into the loop variables");
    }
    for (size_t k = 0; k < n.targets.size(); ++k) scopes_.back()[n.targets[k]] = (*item.list)[k];
    return absl::OkStatus();
  }

  absl::StatusOr<Value> Eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.literal;
      case Expr::Kind::kName: {
        if (Value* v = Lookup(e.name)) return *v;
        return Builtin(e.name, e.line);
      }
      case Expr::Kind::kAttr: {
        STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
        return Attr(obj, e.name, e.line);
      }
      case Expr::Kind::kItem: {
        STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
        STRATA_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
        return Item(obj, key, e.line);
      }
      case Expr::Kind::kSlice: return Slice(e);
      case Expr::Kind::kCall: {
        STRATA_ASSIGN_OR_RETURN(Value fn, Eval(*e.args[0]));
        if (fn.kind != Value::Kind::kFunction) {
          std::string what = e.args[0]->kind == Expr::Kind::kName || e.args[0]->kind == Expr::Kind::kAttr
                                 ? "'" + e.args[0]->name + "'" : "a value";
          return Error(e.line, absl::StrCat("unsupported function ", what, " (", KindName(fn.kind), ")"));
        }
        Args args;
        Kwargs kwargs;
        for (size_t i = 1; i < e.args.size(); ++i) {
          STRATA_ASSIGN_OR_RETURN(Value a, Eval(*e.args[i]));
          args.push_back(std::move(a));
        }
        for (const auto& [k, x] : e.kwargs) {
          STRATA_ASSIGN_OR_RETURN(Value a, Eval(*x));
          kwargs.emplace_back(k, std::move(a));
        }
        auto r = (*fn.fn)(args, kwargs);
        if (!r.ok() && r.status().message().find("chat template") == std::string_view::npos) {
          return Error(e.line, r.status().message());
        }
        return r;
      }
      case Expr::Kind::kFilter: return Filter(e);
      case Expr::Kind::kTest: {
        STRATA_ASSIGN_OR_RETURN(bool r, Test(e));
        return Value::Bool(r != e.negated);
      }
      case Expr::Kind::kNot: {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
        return Value::Bool(!Truthy(v));
      }
      case Expr::Kind::kNeg: {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
        if (v.kind == Value::Kind::kInt) return Value::Int(-v.i);
        if (v.numeric()) return Value::Float(-v.number());
        return Error(e.line, absl::StrCat("cannot negate a ", KindName(v.kind)));
      }
      case Expr::Kind::kAnd: case Expr::Kind::kOr: {
        STRATA_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
        if (Truthy(a) == (e.kind == Expr::Kind::kOr)) return a;  // Python's short-circuit value
        return Eval(*e.args[1]);
      }
      case Expr::Kind::kTernary: {
        STRATA_ASSIGN_OR_RETURN(Value c, Eval(*e.args[0]));
        if (Truthy(c)) return Eval(*e.args[1]);
        if (e.args[2] == nullptr) return Value();
        return Eval(*e.args[2]);
      }
      case Expr::Kind::kBinary: {
        STRATA_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
        STRATA_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
        return Binary(e.name, a, b, e.line);
      }
      case Expr::Kind::kList: case Expr::Kind::kDict: {
        ValueList items;
        for (const ExprPtr& x : e.args) {
          STRATA_ASSIGN_OR_RETURN(Value v, Eval(*x));
          items.push_back(std::move(v));
        }
        if (e.kind == Expr::Kind::kList) return Value::List(std::move(items));
        ValueDict d;
        for (size_t i = 0; i + 1 < items.size(); i += 2) {
          if (items[i].kind != Value::Kind::kString) return Error(e.line, "dict keys must be strings");
          d.emplace_back(items[i].s, std::move(items[i + 1]));
        }
        return Value::Dict(std::move(d));
      }
    }
    return Value();
  }

  absl::StatusOr<Value> Builtin(const std::string& name, int line) {
    if (name == "raise_exception") {
      return Value::Function([line](const Args& a, const Kwargs&) -> absl::StatusOr<Value> {
        return absl::InvalidArgumentError(
            absl::StrCat("chat template line ", line, " raised: ", a.empty() ? std::string() : Str(a[0])));
      });
    }
    if (name == "namespace") {
      return Value::Function([](const Args& a, const Kwargs& kw) -> absl::StatusOr<Value> {
        ValueDict d;
        if (!a.empty() && a[0].kind == Value::Kind::kDict) d = *a[0].dict;
        for (const auto& [k, v] : kw) d.emplace_back(k, v);
        Value ns = Value::Dict(std::move(d));
        ns.is_namespace = true;
        return ns;
      });
    }
    if (name == "range") {
      return Value::Function([](const Args& a, const Kwargs&) -> absl::StatusOr<Value> {
        int64_t lo = 0, hi = 0, step = 1;
        for (const Value& v : a) if (v.kind != Value::Kind::kInt) return absl::InvalidArgumentError("range() takes integers");
        if (a.size() == 1) hi = a[0].i;
        else if (a.size() >= 2) { lo = a[0].i; hi = a[1].i; }
        if (a.size() == 3) step = a[2].i;
        if (a.empty() || a.size() > 3 || step == 0) return absl::InvalidArgumentError("bad range() arguments");
        ValueList out;
        for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
          if (out.size() > 100000) return absl::InvalidArgumentError("range() too long");
          out.push_back(Value::Int(i));
        }
        return Value::List(std::move(out));
      });
    }
    return Value();  // undefined, as Jinja
  }

  absl::StatusOr<Value> Attr(const Value& obj, const std::string& name, int line) {
    if (obj.kind == Value::Kind::kUndefined) return Error(line, absl::StrCat("'.", name, "' of an undefined value"));
    if (obj.kind == Value::Kind::kString) {
      const std::string s = obj.s;
      auto str_fn = [&](auto f) { return Value::Function(f); };
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const bool l = name != "rstrip", r = name != "lstrip";
        return str_fn([s, l, r](const Args& a, const Kwargs&) -> absl::StatusOr<Value> {
          std::string chars = a.empty() || a[0].kind != Value::Kind::kString ? std::string(kSpace) : a[0].s;
          return Value::Str(std::string(Trim(s, chars, l, r)));
        });
      }
      if (name == "startswith" || name == "endswith") {
        const bool start = name == "startswith";
        return str_fn([s, start](const Args& a, const Kwargs&) -> absl::StatusOr<Value> {
          if (a.size() != 1 || a[0].kind != Value::Kind::kString) return absl::InvalidArgumentError("startswith/endswith take one string");
          return Value::Bool(start ? std::string_view(s).starts_with(a[0].s) : std::string_view(s).ends_with(a[0].s));
        });
      }
      if (name == "upper" || name == "lower") {
        const bool up = name == "upper";
        return str_fn([s, up](const Args&, const Kwargs&) -> absl::StatusOr<Value> { return Value::Str(up ? Upper(s) : Lower(s)); });
      }
      if (name == "title") {
        return str_fn([s](const Args&, const Kwargs&) -> absl::StatusOr<Value> {
          std::string t = s;
          bool start = true;
          for (char& c : t) {
            bool alpha = std::isalpha(static_cast<unsigned char>(c));
            if (alpha) c = start ? static_cast<char>(std::toupper(c)) : static_cast<char>(std::tolower(c));
            start = !alpha;
          }
          return Value::Str(t);
        });
      }
      if (name == "replace") {
        return str_fn([s](const Args& a, const Kwargs&) -> absl::StatusOr<Value> {
          if (a.size() != 2 || a[0].kind != Value::Kind::kString || a[1].kind != Value::Kind::kString) {
            return absl::InvalidArgumentError("replace takes two strings");
          }
          return Value::Str(ReplaceAll(s, a[0].s, a[1].s));
        });
      }
      if (name == "split") {
        return str_fn([s](const Args& a, const Kwargs&) -> absl::StatusOr<Value> {
          ValueList parts;
          if (a.empty() || a[0].kind == Value::Kind::kNone) {
            std::string_view rest = s;
            for (;;) {
              rest = Trim(rest, kSpace, true, false);
              if (rest.empty()) break;
              size_t e = rest.find_first_of(kSpace);
              parts.push_back(Value::Str(std::string(rest.substr(0, e))));
              if (e == std::string_view::npos) break;
              rest.remove_prefix(e);
            }
          } else {
            if (a[0].kind != Value::Kind::kString || a[0].s.empty()) return absl::InvalidArgumentError("bad split separator");
            size_t pos = 0;
            for (size_t at = s.find(a[0].s); at != std::string::npos; at = s.find(a[0].s, pos)) {
              parts.push_back(Value::Str(s.substr(pos, at - pos)));
              pos = at + a[0].s.size();
            }
            parts.push_back(Value::Str(s.substr(pos)));
          }
          return Value::List(std::move(parts));
        });
      }
      return Error(line, absl::StrCat("unsupported string method '", name, "'"));
    }
    if (obj.kind == Value::Kind::kDict) {
      if (!obj.is_namespace && (name == "items" || name == "keys" || name == "values" || name == "get")) {
        std::shared_ptr<ValueDict> d = obj.dict;
        return Value::Function([d, name](const Args& a, const Kwargs&) -> absl::StatusOr<Value> {
          if (name == "get") {
            if (a.empty() || a[0].kind != Value::Kind::kString) return absl::InvalidArgumentError("get takes a string key");
            for (const auto& [k, v] : *d) if (k == a[0].s) return v;
            return a.size() > 1 ? a[1] : Value::None();
          }
          ValueList out;
          for (const auto& [k, v] : *d) {
            if (name == "items") out.push_back(Value::List({Value::Str(k), v}));
            else out.push_back(name == "keys" ? Value::Str(k) : v);
          }
          return Value::List(std::move(out));
        });
      }
      if (const Value* v = obj.Find(name)) return *v;
      return Value();
    }
    if (obj.kind == Value::Kind::kList) return Value();  // no attributes used by templates
    if (obj.kind == Value::Kind::kNone) return Error(line, absl::StrCat("'.", name, "' of None"));
    return Value();
  }

  absl::StatusOr<Value> Item(const Value& obj, const Value& key, int line) {
    if (obj.kind == Value::Kind::kUndefined) return Error(line, "subscript of an undefined value");
    if (key.kind == Value::Kind::kString) return Attr(obj, key.s, line);
    if (key.kind != Value::Kind::kInt) return Error(line, "subscript must be a string or an integer");
    int64_t size = obj.kind == Value::Kind::kList ? static_cast<int64_t>(obj.list->size())
                   : obj.kind == Value::Kind::kString ? static_cast<int64_t>(obj.s.size()) : -1;
    if (size < 0) return Error(line, absl::StrCat("cannot index a ", KindName(obj.kind)));
    int64_t i = key.i < 0 ? key.i + size : key.i;
    if (i < 0 || i >= size) return Value();  // undefined, as Jinja
    if (obj.kind == Value::Kind::kList) return (*obj.list)[static_cast<size_t>(i)];
    return Value::Str(std::string(1, obj.s[static_cast<size_t>(i)]));
  }

  absl::StatusOr<Value> Slice(const Expr& e) {
    STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
    int64_t bound[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (size_t k = 0; k < 3 && k + 1 < e.args.size(); ++k) {
      if (e.args[k + 1] == nullptr) continue;
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[k + 1]));
      if (v.kind == Value::Kind::kNone) continue;
      if (v.kind != Value::Kind::kInt) return Error(e.line, "slice bounds must be integers");
      bound[k] = v.i;
      given[k] = true;
    }
    int64_t size = obj.kind == Value::Kind::kList ? static_cast<int64_t>(obj.list->size())
                   : obj.kind == Value::Kind::kString ? static_cast<int64_t>(obj.s.size()) : -1;
    if (size < 0) return Error(e.line, absl::StrCat("cannot slice a ", KindName(obj.kind)));
    const int64_t step = bound[2];
    if (step == 0) return Error(e.line, "slice step cannot be zero");
    auto clamp = [&](int64_t x, bool is_given, int64_t dflt) {
      if (!is_given) return dflt;
      if (x < 0) x += size;
      return step > 0 ? std::clamp<int64_t>(x, 0, size) : std::clamp<int64_t>(x, -1, size - 1);
    };
    int64_t lo = clamp(bound[0], given[0], step > 0 ? 0 : size - 1);
    int64_t hi = clamp(bound[1], given[1], step > 0 ? size : -1);
    ValueList items;
    std::string chars;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
      if (obj.kind == Value::Kind::kList) items.push_back((*obj.list)[static_cast<size_t>(i)]);
      else chars.push_back(obj.s[static_cast<size_t>(i)]);
    }
    return obj.kind == Value::Kind::kList ? Value::List(std::move(items)) : Value::Str(std::move(chars));
  }

  absl::StatusOr<Value> Filter(const Expr& e) {
    STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
    Args args;
    for (size_t i = 1; i < e.args.size(); ++i) {
      STRATA_ASSIGN_OR_RETURN(Value a, Eval(*e.args[i]));
      args.push_back(std::move(a));
    }
    const std::string& f = e.name;
    auto need_string = [&]() -> absl::Status {
      if (v.kind == Value::Kind::kString) return absl::OkStatus();
      return Error(e.line, absl::StrCat("filter '", f, "' of a ", KindName(v.kind)));
    };
    if (f == "trim") {
      STRATA_RETURN_IF_ERROR(need_string());
      return Value::Str(std::string(Trim(v.s, kSpace, true, true)));
    }
    if (f == "upper" || f == "lower") {
      STRATA_RETURN_IF_ERROR(need_string());
      return Value::Str(f == "upper" ? Upper(v.s) : Lower(v.s));
    }
    if (f == "capitalize") {
      STRATA_RETURN_IF_ERROR(need_string());
      std::string s = Lower(v.s);
      if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
      return Value::Str(s);
    }
    if (f == "replace") {
      STRATA_RETURN_IF_ERROR(need_string());
      if (args.size() != 2 || args[0].kind != Value::Kind::kString || args[1].kind != Value::Kind::kString) {
        return Error(e.line, "replace takes two strings");
      }
      return Value::Str(ReplaceAll(v.s, args[0].s, args[1].s));
    }
    if (f == "length" || f == "count") {
      if (v.kind == Value::Kind::kString) return Value::Int(static_cast<int64_t>(v.s.size()));
      if (v.kind == Value::Kind::kList) return Value::Int(static_cast<int64_t>(v.list->size()));
      if (v.kind == Value::Kind::kDict) return Value::Int(static_cast<int64_t>(v.dict->size()));
      return Error(e.line, absl::StrCat("length of a ", KindName(v.kind)));
    }
    if (f == "string") return Value::Str(Str(v));
    if (f == "safe") return v;
    if (f == "default" || f == "d") {
      bool falsy = args.size() > 1 && Truthy(args[1]);
      if (v.kind == Value::Kind::kUndefined || (falsy && !Truthy(v))) return args.empty() ? Value::Str("") : args[0];
      return v;
    }
    if (f == "first" || f == "last") {
      if (v.kind != Value::Kind::kList) return Error(e.line, absl::StrCat("filter '", f, "' of a ", KindName(v.kind)));
      if (v.list->empty()) return Value();
      return f == "first" ? v.list->front() : v.list->back();
    }
    if (f == "list") {
      if (v.kind == Value::Kind::kList) return v;
      return Error(e.line, absl::StrCat("filter 'list' of a ", KindName(v.kind)));
    }
    if (f == "join") {
      if (v.kind != Value::Kind::kList) return Error(e.line, absl::StrCat("filter 'join' of a ", KindName(v.kind)));
      std::vector<std::string> parts;
      for (const Value& x : *v.list) parts.push_back(Str(x));
      return Value::Str(absl::StrJoin(parts, args.empty() ? std::string() : Str(args[0])));
    }
    if (f == "tojson") {
      auto j = ToJson(v);
      if (!j.ok()) return Error(e.line, j.status().message());
      return Value::Str(*std::move(j));
    }
    return Error(e.line, absl::StrCat("unsupported filter '", f, "'"));
  }

  absl::StatusOr<bool> Test(const Expr& e) {
    STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
    const std::string& t = e.name;
    using K = Value::Kind;
    if (t == "defined") return v.kind != K::kUndefined;
    if (t == "undefined") return v.kind == K::kUndefined;
    if (t == "none") return v.kind == K::kNone;
    if (t == "string") return v.kind == K::kString;
    if (t == "number") return v.kind == K::kInt || v.kind == K::kFloat;
    if (t == "integer") return v.kind == K::kInt;
    if (t == "float") return v.kind == K::kFloat;
    if (t == "boolean") return v.kind == K::kBool;
    if (t == "true") return v.kind == K::kBool && v.b;
    if (t == "false") return v.kind == K::kBool && !v.b;
    if (t == "mapping") return v.kind == K::kDict;
    if (t == "sequence" || t == "iterable") return v.kind == K::kList || v.kind == K::kString || v.kind == K::kDict;
    if (t == "callable") return v.kind == K::kFunction;
    if (t == "odd" || t == "even") {
      if (v.kind != K::kInt) return Error(e.line, absl::StrCat("test '", t, "' of a ", KindName(v.kind)));
      return (v.i % 2 != 0) == (t == "odd");
    }
    if (t == "eq" || t == "equalto" || t == "sameas") {
      if (e.args.size() != 2) return Error(e.line, absl::StrCat("test '", t, "' takes one argument"));
      STRATA_ASSIGN_OR_RETURN(Value other, Eval(*e.args[1]));
      return Equal(v, other);
    }
    return Error(e.line, absl::StrCat("unsupported test '", t, "'"));
  }

  absl::StatusOr<Value> Binary(const std::string& op, const Value& a, const Value& b, int line) {
    using K = Value::Kind;
    if (op == "==") return Value::Bool(Equal(a, b));
    if (op == "!=") return Value::Bool(!Equal(a, b));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.kind == K::kString) {
        if (a.kind != K::kString) return Error(line, "'in <string>' needs a string on the left");
        found = b.s.find(a.s) != std::string::npos;
      } else if (b.kind == K::kList) {
        found = std::any_of(b.list->begin(), b.list->end(), [&](const Value& x) { return Equal(a, x); });
      } else if (b.kind == K::kDict) {
        found = a.kind == K::kString && b.Find(a.s) != nullptr;
      } else {
        return Error(line, absl::StrCat("'in' of a ", KindName(b.kind)));
      }
      return Value::Bool(found == (op == "in"));
    }
    if (op == "~") return Value::Str(Str(a) + Str(b));
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int c;
      if (a.numeric() && b.numeric()) c = a.number() < b.number() ? -1 : a.number() > b.number() ? 1 : 0;
      else if (a.kind == K::kString && b.kind == K::kString) c = a.s.compare(b.s) < 0 ? -1 : a.s == b.s ? 0 : 1;
      else return Error(line, absl::StrCat("cannot compare a ", KindName(a.kind), " with a ", KindName(b.kind)));
      bool r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
      return Value::Bool(r);
    }
    if (op == "+") {
      if (a.kind == K::kString && b.kind == K::kString) return Value::Str(a.s + b.s);
      if (a.kind == K::kList && b.kind == K::kList) {
        ValueList l = *a.list;
        l.insert(l.end(), b.list->begin(), b.list->end());
        return Value::List(std::move(l));
      }
    }
    if (op == "*" && a.kind == K::kString && b.kind == K::kInt) {
      std::string s;
      for (int64_t i = 0; i < b.i && s.size() < (1u << 20); ++i) s += a.s;
      return Value::Str(s);
    }
    if (a.numeric() && b.numeric()) {
      const bool ints = a.kind != K::kFloat && b.kind != K::kFloat;
      const int64_t x = a.kind == K::kBool ? a.b : a.i, y = b.kind == K::kBool ? b.b : b.i;
      if (op == "+") return ints ? Value::Int(x + y) : Value::Float(a.number() + b.number());
      if (op == "-") return ints ? Value::Int(x - y) : Value::Float(a.number() - b.number());
      if (op == "*") return ints ? Value::Int(x * y) : Value::Float(a.number() * b.number());
      if (op == "/") {
        if (b.number() == 0) return Error(line, "division by zero");
        return Value::Float(a.number() / b.number());
      }
      if (op == "//" || op == "%") {
        if (!ints) return Error(line, absl::StrCat("'", op, "' of floats is not supported"));
        if (y == 0) return Error(line, "division by zero");
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) { --q; r += y; }  // Python floors
        return Value::Int(op == "//" ? q : r);
      }
    }
    return Error(line, absl::StrCat("unsupported operands for '", op, "': ", KindName(a.kind), " and ", KindName(b.kind)));
  }

  std::vector<std::map<std::string, Value>> scopes_;
  std::string out_;
};

}  // namespace

ChatTemplate::~ChatTemplate() = default;

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Parse(std::string_view source) {
  STRATA_ASSIGN_OR_RETURN(std::vector<Chunk> chunks, Scan(std::string(source)));
  TemplateParser parser(std::move(chunks));
  auto root = std::make_unique<Node>();
  STRATA_ASSIGN_OR_RETURN(std::string end, parser.Body(*root, {}));
  std::unique_ptr<ChatTemplate> t(new ChatTemplate());
  t->root_ = std::move(root);
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Render(absl::Span<const ChatMessage> messages,
                                                 const ChatTemplateVars& vars) const {
  ValueList list;
  for (const ChatMessage& m : messages) {
    list.push_back(Value::Dict({{"role", Value::Str(m.role)}, {"content", Value::Str(m.content)}}));
  }
  std::map<std::string, Value> globals;
  globals["messages"] = Value::List(std::move(list));
  globals["bos_token"] = Value::Str(vars.bos_token);
  globals["eos_token"] = Value::Str(vars.eos_token);
  globals["add_generation_prompt"] = Value::Bool(vars.add_generation_prompt);
  Renderer r(std::move(globals));
  Renderer::Flow flow = Renderer::Flow::kNormal;
  STRATA_RETURN_IF_ERROR(r.Exec(*root_, flow));
  return std::move(r.out());
}

}  // namespace strata::text
