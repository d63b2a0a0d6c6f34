// The parsed form of a Jinja template: expression trees (Expr) and statement trees
// (Node). The parser (parser.h) builds them; the renderer (renderer.h) walks them. Each
// node owns its children and keeps the template line it came from, for error messages.
// Immutable once parsed, so one tree may be rendered by many threads at once.
#ifndef STRATA_TEXT_JINJA_AST_H_
#define STRATA_TEXT_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace strata::text::jinja {

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

struct Node {
  enum class Kind { kBlock, kText, kOutput, kIf, kFor, kSet, kBreak, kContinue };
  Kind kind = Kind::kBlock;
  int line = 0;
  std::string text;                     // kText
  std::vector<std::unique_ptr<Node>> children;  // kBlock; kIf: one body per condition, then else
  std::vector<ExprPtr> exprs;           // kOutput: value; kIf: conditions; kFor: iterable, filter; kSet: value
  std::vector<std::string> targets;     // kFor: loop variables; kSet: name, or namespace + attribute
};
using NodePtr = std::unique_ptr<Node>;

}  // namespace strata::text::jinja

#endif  // STRATA_TEXT_JINJA_AST_H_
