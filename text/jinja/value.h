// Value: the dynamic value a Jinja template computes with (undefined, none, bool, int,
// float, string, list, dict, function), and the operations that need no interpreter:
// truthiness, Python's str() and repr(), `tojson`, equality.
//
// Values are cheap to copy: lists, dicts and functions are shared, so a namespace()
// dict is changed in place by `set ns.x = ...` wherever it was copied to. Dicts keep
// insertion order, as Python's do. Not thread-safe: a Value belongs to one render.
#ifndef STRATA_TEXT_JINJA_VALUE_H_
#define STRATA_TEXT_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::text::jinja {

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

// The kind's name in error messages ("undefined", "int", "dict", ...).
const char* KindName(Value::Kind k);

// Python's bool(): false for undefined, none, 0, "", [] and {}.
bool Truthy(const Value& v);

// What `{{ v }}` prints (Python's str()): "" for undefined, "None", "True", "1.0", the
// string itself; lists and dicts as Repr.
std::string Str(const Value& v);

// Python's repr(): strings quoted with ', lists and dicts with ", " and ": ".
std::string Repr(const Value& v);

// `tojson` as transformers defines it: json.dumps(ensure_ascii=False), ", " and ": ".
// InvalidArgument "tojson of a function" (no line: the caller adds it).
absl::StatusOr<std::string> ToJson(const Value& v);

// Jinja's ==: numbers (bool included) by value, strings, lists and dicts deeply (dicts
// regardless of order), functions by identity; values of other kinds are unequal.
bool Equal(const Value& a, const Value& b);

}  // namespace strata::text::jinja

#endif  // STRATA_TEXT_JINJA_VALUE_H_
