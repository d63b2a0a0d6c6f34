#include "text/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace strata::text {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Length of the UTF-8 sequence starting at s[0], 0 if it is not a valid complete
// sequence, -1 if it is a valid but incomplete prefix.
int Utf8SequenceLength(std::string_view s) {
  auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char c = b(0);
  int len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c == 0xE0) { len = 3; lo = 0xA0; }
  else if (c >= 0xE1 && c <= 0xEC) len = 3;
  else if (c == 0xED) { len = 3; hi = 0x9F; }
  else if (c >= 0xEE && c <= 0xEF) len = 3;
  else if (c == 0xF0) { len = 4; lo = 0x90; }
  else if (c >= 0xF1 && c <= 0xF3) len = 4;
  else if (c == 0xF4) { len = 4; hi = 0x8F; }
  else return 0;
  for (int i = 1; i < len; ++i) {
    if (static_cast<size_t>(i) >= s.size()) return -1;
    unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
    if (b(i) < lo_i || b(i) > hi_i) return 0;
  }
  return len;
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  while (!text.empty()) {
    int n = Utf8SequenceLength(text);
    if (n <= 0) return false;
    text.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string Utf8StreamDecoder::Feed(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  std::string_view rest = pending_;
  while (!rest.empty()) {
    int n = Utf8SequenceLength(rest);
    if (n < 0) break;  // incomplete: wait for more bytes
    if (n == 0) {
      out.append(kReplacement);
      rest.remove_prefix(1);
    } else {
      out.append(rest.substr(0, static_cast<size_t>(n)));
      rest.remove_prefix(static_cast<size_t>(n));
    }
  }
  pending_ = std::string(rest);
  return out;
}

std::string Utf8StreamDecoder::Flush() {
  std::string out;
  for (size_t i = 0; i < pending_.size(); ++i) out.append(kReplacement);
  pending_.clear();
  return out;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view) const {
  return absl::UnimplementedError("this tokenizer has no text form: send token_ids");
}

absl::StatusOr<std::vector<int32_t>> ByteTokenizer::RenderChat(
    absl::Span<const ChatMessage> messages) const {
  if (messages.empty()) return absl::InvalidArgumentError("the conversation has no messages");
  std::vector<int32_t> ids{kBos};
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    int32_t role;
    if (m.role == "system") role = kSystem;
    else if (m.role == "user") role = kUser;
    else if (m.role == "assistant") role = kAssistant;
    else {
      return absl::InvalidArgumentError(absl::StrCat(
          "message ", i, " has unknown role '", m.role, "' (expected system, user or assistant)"));
    }
    if (!IsValidUtf8(m.content)) {
      return absl::InvalidArgumentError(absl::StrCat("message ", i, " content is not valid UTF-8"));
    }
    ids.push_back(role);
    for (unsigned char c : m.content) ids.push_back(c);
    ids.push_back(kEnd);
  }
  ids.push_back(kAssistant);
  return ids;
}

absl::StatusOr<std::vector<int32_t>> ByteTokenizer::Encode(std::string_view text) const {
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("the text is not valid UTF-8");
  return std::vector<int32_t>(reinterpret_cast<const unsigned char*>(text.data()),
                              reinterpret_cast<const unsigned char*>(text.data()) + text.size());
}

std::string_view ByteTokenizer::TokenBytes(int32_t token) const {
  static const auto* kBytes = [] {
    auto* table = new std::string[256];
    for (int i = 0; i < 256; ++i) table[i] = std::string(1, static_cast<char>(i));
    return table;
  }();
  if (token >= 0 && token < 256) return kBytes[token];
  return {};
}

std::vector<int32_t> ByteTokenizer::SilentTokens() const {
  std::vector<int32_t> silent;
  for (int32_t t = 0; t < kVocabSize; ++t) {
    bool printable = (t >= 0x20 && t < 0x7F) || t == '\n';
    if (!printable && t != kEnd) silent.push_back(t);
  }
  return silent;
}

absl::StatusOr<std::vector<int32_t>> TokenIdsOnlyTokenizer::RenderChat(absl::Span<const ChatMessage>) const {
  return absl::InvalidArgumentError(
      "this model's tokenizer and chat template are not supported yet: send the prompt as token_ids");
}

bool TokenIdsOnlyTokenizer::IsStopToken(int32_t token) const {
  return std::find(stop_tokens_.begin(), stop_tokens_.end(), token) != stop_tokens_.end();
}

}  // namespace strata::text
