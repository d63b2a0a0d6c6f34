#include "text/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "text/jinja/error.h"
#include "text/jinja/strings.h"

namespace strata::text::jinja {

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
        if (r.ec != std::errc()) return TemplateError(line, "integer literal out of range");
      }
    } else if (c == '\'' || c == '"') {
      ++i;
      t.kind = Token::Kind::kString;
      for (;;) {
        if (i >= s.size()) return TemplateError(line, "unterminated string literal");
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
          return TemplateError(line, absl::StrCat("unexpected character '", std::string(1, c), "'"));
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
    if (end + 1 >= src.size()) return TemplateError(line, absl::StrCat("unclosed '", std::string(1, '{'), std::string(1, open), "'"));
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

}  // namespace strata::text::jinja
