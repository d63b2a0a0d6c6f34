#include "text/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/bytestream.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "text/tokenizer.h"
#include "nlohmann/json.hpp"

namespace strata::text {

// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available). PCRE2 speaks
// the Oniguruma syntax these tokenizer.json patterns use (`(?i:...)`, `\p{L}`, `(?!\S)`).
class RegexSplitter {
 public:
  static absl::StatusOr<std::shared_ptr<RegexSplitter>> Compile(std::string_view pattern, bool literal) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                                     &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return absl::InvalidArgumentError(absl::StrCat("pre-tokenizer regex does not compile at offset ", offset,
                                                     ": ", reinterpret_cast<const char*>(message)));
    }
    auto r = std::shared_ptr<RegexSplitter>(new RegexSplitter(code));
    r->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    return r;
  }
  ~RegexSplitter() { pcre2_code_free(code_); }

  // Appends to `out` the pieces of `text`: each match and each gap between matches
  // (kept in order), or only the gaps when `removed`.
  void Split(std::string_view text, bool removed, std::vector<std::string_view>& out) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0, gap = 0;
    while (pos <= text.size()) {
      // The text was checked as UTF-8 by Encode.
      int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr)
                    : pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      size_t begin = ov[0], end = ov[1];
      if (end == begin) {  // empty match: step over one character
        if (begin >= text.size()) break;
        pos = begin + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
        continue;
      }
      if (begin > gap) out.push_back(text.substr(gap, begin - gap));
      if (!removed) out.push_back(text.substr(begin, end - begin));
      pos = gap = end;
    }
    if (gap < text.size()) out.push_back(text.substr(gap));
    pcre2_match_data_free(md);
  }

 private:
  explicit RegexSplitter(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
  bool jit_ = false;
};

namespace {

using Json = nlohmann::json;

// Debian's Abseil has its own string_view: the bridge for StrCat and map lookups.
absl::string_view Av(std::string_view s) { return {s.data(), s.size()}; }

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // ▁ U+2581
// GPT-2's pattern, used by a ByteLevel pre-tokenizer with use_regex = true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's byte-to-unicode table, inverted: code point -> byte (-1 where none).
const std::array<int, 324>& UnicodeToByte() {
  static const std::array<int, 324> table = [] {
    std::array<int, 324> t;
    t.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[printable ? b : 256 + extra++] = b;
    }
    return t;
  }();
  return table;
}

// Decodes one UTF-8 character at s[i] (s is valid UTF-8), advancing i.
uint32_t NextCodePoint(std::string_view s, size_t& i) {
  auto c = static_cast<unsigned char>(s[i]);
  int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < len && i + static_cast<size_t>(k) < s.size(); ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
  }
  i += static_cast<size_t>(len);
  return cp;
}

size_t Utf8Length(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// A byte-level vocabulary entry ("Ġhello") as the bytes it stands for (" hello").
absl::StatusOr<std::string> ByteLevelToBytes(std::string_view written) {
  if (!IsValidUtf8(written)) return absl::InvalidArgumentError("a byte-level token is not valid UTF-8");
  std::string bytes;
  for (size_t i = 0; i < written.size();) {
    uint32_t cp = NextCodePoint(written, i);
    int b = cp < UnicodeToByte().size() ? UnicodeToByte()[cp] : -1;
    if (b < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("token '", Av(written), "' is not in the byte-level alphabet (U+", cp, ")"));
    }
    bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

// "<0x0A>" -> 10; -1 if `piece` is not a byte-fallback piece.
int ByteFallbackValue(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int v = 0;
  for (char c : piece.substr(3, 2)) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

absl::StatusOr<std::string> NfcNormalize(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return std::string(text);
  }
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(error);
  if (U_FAILURE(error)) return absl::InternalError(absl::StrCat("ICU NFC: ", u_errorName(error)));
  icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (nfc->isNormalizedUTF8(piece, error) && U_SUCCESS(error)) return std::string(text);
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  error = U_ZERO_ERROR;
  nfc->normalizeUTF8(0, piece, sink, nullptr, error);
  if (U_FAILURE(error)) return absl::InternalError(absl::StrCat("ICU NFC: ", u_errorName(error)));
  return out;
}

absl::Status Unsupported(std::string_view where, const Json& j) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: unsupported ", Av(where), ": ", j.dump()));
}

}  // namespace

BpeTokenizer::~BpeTokenizer() = default;

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromJson(std::string_view json_text) {
  Json j = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("tokenizer.json is not a JSON object");
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  // The decoder matters to strata only for the space it strips off the start of a text.
  if (auto d = j.find("decoder"); d != j.end() && d->is_object()) {
    std::vector<Json> steps;
    if (d->value("type", "") == "Sequence") {
      for (const Json& s : d->value("decoders", Json::array())) steps.push_back(s);
    } else {
      steps.push_back(*d);
    }
    for (const Json& s : steps) {
      const std::string type = s.value("type", "");
      if (type == "Strip" && s.value("content", "") == " " && s.value("start", 0) >= 1) t->drops_leading_space_ = true;
      if (type == "Metaspace" && s.value("prepend_scheme", s.value("add_prefix_space", true) ? "always" : "never") !=
                                     "never") {
        t->drops_leading_space_ = true;
      }
    }
  }

  // Pre-tokenizers first: they say whether the vocabulary is byte-level.
  std::vector<Json> pre;
  if (auto p = j.find("pre_tokenizer"); p != j.end() && !p->is_null()) {
    if (p->value("type", "") == "Sequence") {
      for (const Json& s : p->value("pretokenizers", Json::array())) pre.push_back(s);
    } else {
      pre.push_back(*p);
    }
  }
  for (size_t i = 0; i < pre.size(); ++i) {
    const Json& s = pre[i];
    const std::string type = s.value("type", "");
    PreTokenizerStep step;
    if (type == "Split") {
      const std::string behavior = s.value("behavior", "");
      if ((behavior != "Isolated" && behavior != "Removed") || s.value("invert", false)) {
        return Unsupported("Split pre-tokenizer behavior", s);
      }
      const Json& pattern = s.value("pattern", Json::object());
      bool literal = pattern.contains("String");
      if (!literal && !pattern.contains("Regex")) return Unsupported("Split pattern", s);
      auto regex = RegexSplitter::Compile(pattern.value(literal ? "String" : "Regex", ""), literal);
      if (!regex.ok()) return regex.status();
      step.kind = PreTokenizer::kSplit;
      step.regex = *std::move(regex);
      step.removed = behavior == "Removed";
    } else if (type == "ByteLevel") {
      t->byte_level_ = true;
      if (!s.value("use_regex", true) && !s.value("add_prefix_space", false)) continue;
      step.kind = PreTokenizer::kByteLevelSplit;
      step.add_prefix_space = s.value("add_prefix_space", false);
      if (s.value("use_regex", true)) {
        auto regex = RegexSplitter::Compile(kGpt2Pattern, false);
        if (!regex.ok()) return regex.status();
        step.regex = *std::move(regex);
      }
    } else if (type == "Metaspace") {
      if (i != 0) return Unsupported("Metaspace pre-tokenizer after another one", s);
      if (s.value("replacement", std::string(kMetaspace)) != kMetaspace) return Unsupported("Metaspace replacement", s);
      step.kind = PreTokenizer::kMetaspace;
      step.prepend_scheme = s.value("prepend_scheme", s.value("add_prefix_space", true) ? "always" : "never");
      if (step.prepend_scheme != "always" && step.prepend_scheme != "first" && step.prepend_scheme != "never") {
        return Unsupported("Metaspace prepend_scheme", s);
      }
      step.split = s.value("split", true);
    } else {
      return Unsupported("pre-tokenizer", s);
    }
    t->pre_tokenizers_.push_back(std::move(step));
  }

  if (auto n = j.find("normalizer"); n != j.end() && !n->is_null()) {
    std::vector<Json> steps;
    if (n->value("type", "") == "Sequence") {
      for (const Json& s : n->value("normalizers", Json::array())) steps.push_back(s);
    } else {
      steps.push_back(*n);
    }
    for (const Json& s : steps) {
      const std::string type = s.value("type", "");
      if (type == "NFC") {
        t->normalizers_.push_back({Normalizer::kNfc, "", ""});
      } else if (type == "Prepend") {
        t->normalizers_.push_back({Normalizer::kPrepend, s.value("prepend", ""), ""});
      } else if (type == "Replace" && s.contains("pattern") && s["pattern"].contains("String")) {
        t->normalizers_.push_back({Normalizer::kReplace, s["pattern"].value("String", ""), s.value("content", "")});
      } else {
        return Unsupported("normalizer", s);
      }
    }
  }

  const Json& model = j.value("model", Json::object());
  if (model.value("type", "BPE") != "BPE" || !model.contains("vocab") || !model.contains("merges")) {
    return Unsupported("model (only BPE with vocab and merges)", Json(model.value("type", "")));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      return Unsupported(key, model[key]);
    }
  }
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0) {
    return Unsupported("BPE dropout", model["dropout"]);
  }
  t->byte_fallback_ = model.value("byte_fallback", false);
  t->fuse_unk_ = model.value("fuse_unk", false);
  t->ignore_merges_ = model.value("ignore_merges", false);

  // Vocabulary.
  const Json& vocab = model["vocab"];
  if (!vocab.is_object()) return absl::InvalidArgumentError("tokenizer.json: model.vocab is not an object");
  int32_t max_id = -1;
  std::vector<std::pair<std::string, int32_t>> entries;
  entries.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > (1 << 24)) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: vocab entry '", it.key(), "' has a bad id"));
    }
    entries.emplace_back(it.key(), it.value().get<int32_t>());
    max_id = std::max(max_id, entries.back().second);
  }
  std::vector<AddedToken> added;
  for (const Json& a : j.value("added_tokens", Json::array())) {
    if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string() ||
        a["content"].get<std::string>().empty() || a["id"].get<int64_t>() < 0 || a["id"].get<int64_t>() > (1 << 24)) {
      return Unsupported("added token", a);
    }
    added.push_back({a["content"], a["id"], a.value("special", false), a.value("lstrip", false),
                     a.value("rstrip", false)});
    max_id = std::max(max_id, added.back().id);
  }
  t->vocab_size_ = max_id + 1;
  t->token_bytes_.resize(static_cast<size_t>(t->vocab_size_));
  t->special_.assign(static_cast<size_t>(t->vocab_size_), false);
  t->vocab_.reserve(entries.size());
  for (auto& [written, id] : entries) {
    std::string key = written;
    if (t->byte_level_) {
      auto bytes = ByteLevelToBytes(written);
      if (!bytes.ok()) return bytes.status();
      key = *std::move(bytes);
      t->token_bytes_[static_cast<size_t>(id)] = key;
    } else {
      int b = ByteFallbackValue(written);
      t->token_bytes_[static_cast<size_t>(id)] =
          b >= 0 ? std::string(1, static_cast<char>(b)) : absl::StrReplaceAll(written, {{Av(kMetaspace), " "}});
    }
    t->vocab_.emplace(key, id);
    t->written_.emplace(std::move(written), id);
  }
  for (int b = 0; b < 256; ++b) {
    t->byte_ids_[b] = -1;
    if (t->byte_level_) {
      auto it = t->vocab_.find(std::string(1, static_cast<char>(b)));
      if (it == t->vocab_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: byte-level vocab lacks byte ", b));
      }
      t->byte_ids_[b] = it->second;
    } else if (t->byte_fallback_) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      auto it = t->vocab_.find(absl::string_view(name));
      if (it == t->vocab_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: byte_fallback but no ", name, " token"));
      }
      t->byte_ids_[b] = it->second;
    }
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = t->written_.find(model["unk_token"].get<std::string>());
    if (it == t->written_.end()) return Unsupported("unk_token (not in the vocabulary)", model["unk_token"]);
    t->unk_id_ = it->second;
  }
  if (!t->byte_level_ && !t->byte_fallback_ && t->unk_id_ < 0) {
    return absl::InvalidArgumentError("tokenizer.json: a character-level BPE needs byte_fallback or an unk_token");
  }

  // Merges: "a b" strings (older files) or [a, b] pairs.
  const Json& merges = model["merges"];
  if (!merges.is_array()) return absl::InvalidArgumentError("tokenizer.json: model.merges is not a list");
  t->merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const Json& m : merges) {
    std::string a, b;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      size_t space = s.find(' ');
      if (space == std::string::npos) return Unsupported("merge", m);
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0];
      b = m[1];
    } else {
      return Unsupported("merge", m);
    }
    auto ia = t->written_.find(a), ib = t->written_.find(b), im = t->written_.find(a + b);
    if (ia == t->written_.end() || ib == t->written_.end() || im == t->written_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: merge '", a, " ", b, "' uses a token not in the vocab"));
    }
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) | static_cast<uint32_t>(ib->second);
    t->merges_.emplace(key, Merge{rank++, im->second});
  }

  for (AddedToken& a : added) {
    const size_t id = static_cast<size_t>(a.id);
    t->special_[id] = a.special;
    t->token_bytes_[id] = a.special ? std::string() : a.content;
    t->written_.insert_or_assign(a.content, a.id);
    t->added_first_byte_[static_cast<unsigned char>(a.content[0])] = true;
  }
  std::stable_sort(added.begin(), added.end(),
                   [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  t->added_ = std::move(added);
  return t;
}

std::optional<int32_t> BpeTokenizer::TokenId(std::string_view written) const {
  auto it = written_.find(Av(written));
  if (it == written_.end()) return std::nullopt;
  return it->second;
}

std::string_view BpeTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return {};
  return token_bytes_[static_cast<size_t>(id)];
}

bool BpeTokenizer::IsSpecial(int32_t id) const { return id >= 0 && id < vocab_size_ && special_[static_cast<size_t>(id)]; }

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(std::string_view text) const {
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("the text to encode is not valid UTF-8");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t segment = 0;
  for (size_t pos = 0; pos < text.size();) {
    const AddedToken* hit = nullptr;
    if (added_first_byte_[static_cast<unsigned char>(text[pos])]) {
      for (const AddedToken& a : added_) {  // longest first: leftmost-longest match
        if (text.compare(pos, a.content.size(), a.content) == 0) {
          hit = &a;
          break;
        }
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t end = pos + hit->content.size(), cut = pos;
    if (hit->lstrip) while (cut > segment && is_space(text[cut - 1])) --cut;
    if (hit->rstrip) while (end < text.size() && is_space(text[end])) ++end;
    EncodeSegment(text.substr(segment, cut - segment), segment == 0, out);
    out.push_back(hit->id);
    pos = segment = end;
  }
  EncodeSegment(text.substr(segment), segment == 0, out);
  return out;
}

void BpeTokenizer::EncodeSegment(std::string_view segment, bool at_start, std::vector<int32_t>& out) const {
  if (segment.empty()) return;
  std::string normalized;
  std::string_view text = segment;
  if (!normalizers_.empty()) {
    normalized = std::string(segment);
    for (const NormalizerStep& n : normalizers_) {
      switch (n.kind) {
        case Normalizer::kNfc: {
          auto nfc = NfcNormalize(normalized);
          if (nfc.ok()) normalized = *std::move(nfc);  // ICU cannot fail on valid UTF-8
          break;
        }
        case Normalizer::kPrepend:
          if (!normalized.empty()) normalized.insert(0, n.a);
          break;
        case Normalizer::kReplace:
          normalized = absl::StrReplaceAll(normalized, {{n.a, n.b}});
          break;
      }
    }
    text = normalized;
  }
  std::vector<std::string_view> pieces{text}, next;
  std::deque<std::string> prefixed;  // ByteLevel add_prefix_space copies (stable addresses)
  for (const PreTokenizerStep& p : pre_tokenizers_) {
    next.clear();
    if (p.kind == PreTokenizer::kMetaspace) {
      std::string s = absl::StrReplaceAll(Av(text), {{" ", Av(kMetaspace)}});
      bool prepend = p.prepend_scheme == "always" || (p.prepend_scheme == "first" && at_start);
      if (prepend && !s.starts_with(kMetaspace)) s.insert(0, kMetaspace);
      normalized = std::move(s);
      text = normalized;
      if (!p.split) {
        next.push_back(text);
      } else {
        size_t begin = 0;
        for (size_t at = text.find(kMetaspace, 1); at != std::string_view::npos; at = text.find(kMetaspace, at + 1)) {
          next.push_back(text.substr(begin, at - begin));
          begin = at;
        }
        next.push_back(text.substr(begin));
      }
    } else {
      for (std::string_view piece : pieces) {
        if (p.kind == PreTokenizer::kByteLevelSplit && p.add_prefix_space && !piece.starts_with(' ')) {
          prefixed.push_back(absl::StrCat(" ", Av(piece)));
          piece = prefixed.back();
        }
        if (p.regex == nullptr) {
          next.push_back(piece);
        } else {
          p.regex->Split(piece, p.removed, next);
        }
      }
    }
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) EncodePiece(piece, out);
}

int32_t BpeTokenizer::LookupPair(int32_t a, int32_t b, int32_t* merged) const {
  auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b));
  if (it == merges_.end()) return -1;
  *merged = it->second.id;
  return it->second.rank;
}

void BpeTokenizer::EncodePiece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(Av(piece)); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();
  auto push_symbol = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1});
    if (n > 0) symbols[static_cast<size_t>(n - 1)].next = n;
  };
  if (byte_level_) {
    for (char c : piece) push_symbol(byte_ids_[static_cast<unsigned char>(c)]);
  } else {
    for (size_t i = 0; i < piece.size();) {
      const size_t len = std::min(Utf8Length(static_cast<unsigned char>(piece[i])), piece.size() - i);
      std::string_view ch = piece.substr(i, len);
      i += len;
      if (auto it = vocab_.find(Av(ch)); it != vocab_.end()) {
        push_symbol(it->second);
      } else if (byte_fallback_) {
        for (char c : ch) push_symbol(byte_ids_[static_cast<unsigned char>(c)]);
      } else if (!(fuse_unk_ && !symbols.empty() && symbols.back().id == unk_id_)) {
        push_symbol(unk_id_);
      }
    }
  }
  auto consider = [&](int32_t left) {
    const Symbol& l = symbols[static_cast<size_t>(left)];
    if (l.next < 0) return;
    int32_t merged = 0;
    int32_t rank = LookupPair(l.id, symbols[static_cast<size_t>(l.next)].id, &merged);
    if (rank < 0) return;
    heap.push_back({rank, left, merged});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& l = symbols[static_cast<size_t>(top.pos)];
    if (l.id < 0 || l.next < 0) continue;  // merged away, or nothing to its right any more
    Symbol& r = symbols[static_cast<size_t>(l.next)];
    int32_t merged = 0;
    if (LookupPair(l.id, r.id, &merged) != top.rank || merged != top.merged) continue;  // stale
    l.id = top.merged;
    r.id = -1;
    l.next = r.next;
    if (l.next >= 0) symbols[static_cast<size_t>(l.next)].prev = top.pos;
    if (l.prev >= 0) consider(l.prev);
    consider(top.pos);
  }
  for (int32_t i = 0; i >= 0 && !symbols.empty(); i = symbols[static_cast<size_t>(i)].next) {
    out.push_back(symbols[static_cast<size_t>(i)].id);
  }
}

}  // namespace strata::text
