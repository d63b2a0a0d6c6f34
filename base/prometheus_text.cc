#include "base/prometheus_text.h"

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace strata::metrics {
namespace {

bool IsNameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

absl::StatusOr<std::pair<std::string, double>> ParseLine(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && IsNameChar(line[i], i == 0)) ++i;
  if (i == 0) return absl::InvalidArgumentError("no metric name");
  std::string key(line.substr(0, i));
  std::vector<std::pair<std::string, std::string>> labels;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      size_t start = i;
      while (i < line.size() && IsNameChar(line[i], i == start)) ++i;
      std::string name(line.substr(start, i - start));
      if (name.empty() || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
        return absl::InvalidArgumentError("bad label");
      }
      i += 2;
      std::string value;
      while (i < line.size() && line[i] != '"') {
        if (line[i] == '\\' && i + 1 < line.size()) {
          value += line[i + 1] == 'n' ? '\n' : line[i + 1];
          i += 2;
        } else {
          value += line[i++];
        }
      }
      if (i >= line.size()) return absl::InvalidArgumentError("unterminated label value");
      ++i;  // closing quote
      labels.emplace_back(std::move(name), std::move(value));
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return absl::InvalidArgumentError("unterminated labels");
    ++i;  // '}'
  }
  if (i >= line.size() || line[i] != ' ') return absl::InvalidArgumentError("no value");
  std::string value_text(line.substr(i + 1));
  if (size_t sp = value_text.find(' '); sp != std::string::npos) value_text.resize(sp);  // timestamp
  double value;
  if (value_text == "+Inf") value = HUGE_VAL;
  else if (value_text == "-Inf") value = -HUGE_VAL;
  else {
    char* end = nullptr;
    value = std::strtod(value_text.c_str(), &end);
    if (end == value_text.c_str() || *end != '\0') return absl::InvalidArgumentError("bad value");
  }
  if (!labels.empty()) {
    std::sort(labels.begin(), labels.end());
    key += '{';
    for (size_t j = 0; j < labels.size(); ++j) {
      if (j > 0) key += ',';
      key += labels[j].first + "=\"";
      for (char c : labels[j].second) {
        if (c == '\\') key += "\\\\";
        else if (c == '"') key += "\\\"";
        else if (c == '\n') key += "\\n";
        else key += c;
      }
      key += '"';
    }
    key += '}';
  }
  return std::make_pair(std::move(key), value);
}

}  // namespace

absl::StatusOr<std::map<std::string, double>> ParsePrometheusText(std::string_view text) {
  std::map<std::string, double> out;
  int line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    auto sample = ParseLine(line);
    if (!sample.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": ", sample.status().message(),
                                                     ": ", std::string(line)));
    }
    out[sample->first] = sample->second;
  }
  return out;
}

}  // namespace strata::metrics
