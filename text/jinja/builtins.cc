#include "text/jinja/builtins.h"

#include <algorithm>
#include <cctype>
#include <memory>

#include "absl/strings/str_cat.h"
#include "text/jinja/error.h"
#include "text/jinja/strings.h"

namespace strata::text::jinja {
namespace {

absl::Status Error(int line, absl::string_view what) { return TemplateError(line, what); }

}  // namespace

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

}  // namespace strata::text::jinja
