#include "text/jinja/renderer.h"

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "text/jinja/builtins.h"
#include "text/jinja/error.h"
#include "text/jinja/strings.h"

namespace strata::text::jinja {
namespace {

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
  static absl::Status Error(int line, absl::string_view what) { return TemplateError(line, what); }

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

  std::vector<std::map<std::string, Value>> scopes_;
  std::string out_;
};

}  // namespace

absl::StatusOr<std::string> Render(const Node& root, std::map<std::string, Value> globals) {
  Renderer r(std::move(globals));
  Renderer::Flow flow = Renderer::Flow::kNormal;
  STRATA_RETURN_IF_ERROR(r.Exec(root, flow));
  return std::move(r.out());
}

}  // namespace strata::text::jinja
