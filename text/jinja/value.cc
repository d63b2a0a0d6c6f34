#include "text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace strata::text::jinja {
namespace {

std::string FloatText(double x) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (std::isnan(x)) return "nan";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), x);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
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

}  // namespace

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

}  // namespace strata::text::jinja
