#include "text/jinja/strings.h"

namespace strata::text::jinja {

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
}  // namespace strata::text::jinja
