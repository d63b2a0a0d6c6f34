#include "text/sentencepiece_tokenizer.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "text/sentencepiece_model.h"
#include "text/tokenizer.h"

namespace strata::text {
namespace {

constexpr char kSpaceMarker[] = "\xE2\x96\x81";  // ▁ (U+2581), SentencePiece's space

// "<0x0A>" -> '\n'; nullopt for any other spelling.
std::optional<char> BytePiece(std::string_view piece) {
  if (piece.size() != 6 || !piece.starts_with("<0x") || piece[5] != '>') return std::nullopt;
  char* end = nullptr;
  const std::string hex(piece.substr(3, 2));
  const long value = std::strtol(hex.c_str(), &end, 16);
  if (end != hex.c_str() + 2) return std::nullopt;
  return static_cast<char>(value);
}

}  // namespace

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::FromModel(
    std::string_view serialized, const SentencePieceOptions& options) {
  if (std::string why; !SentencePieceModel::Available(&why)) return absl::UnimplementedError(why);
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->legacy_ = options.legacy;
  t->add_prefix_space_ = options.add_prefix_space;
  // transformers' non-legacy LlamaTokenizer loads the model with its dummy prefix off and
  // adds "▁" itself, only at the start of the text.
  std::string error;
  t->model_ = SentencePieceModel::Load(serialized, /*add_dummy_prefix=*/options.legacy, &error);
  if (t->model_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("not a SentencePiece model (", error, ")"));
  }
  const SentencePieceModel& m = *t->model_;
  if (options.legacy) {
    const std::vector<int32_t> probe = m.Encode("a");
    t->drops_leading_space_ = !probe.empty() && m.Piece(probe[0]).starts_with(kSpaceMarker);
  } else {
    t->drops_leading_space_ = options.add_prefix_space;
    if (m.unk_id() >= 0) t->unk_prefix_pieces_ = m.Encode(m.Piece(m.unk_id())).size();
  }

  int size = m.piece_count();
  for (const SentencePieceAddedToken& a : options.added_tokens) {
    if (a.id < 0 || a.content.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("added token ", a.id, " '", a.content, "' has a negative ID or no content"));
    }
    size = std::max(size, a.id + 1);
  }
  t->token_bytes_.resize(static_cast<size_t>(size));
  t->special_.assign(static_cast<size_t>(size), false);
  for (int32_t id = 0; id < m.piece_count(); ++id) {
    const std::string& piece = m.Piece(id);
    switch (m.Type(id)) {
      case SentencePieceModel::PieceType::kControl:
      case SentencePieceModel::PieceType::kUnknown:
        // HF's LlamaTokenizer makes <s>, </s> and <unk> special tokens: cut out of the text
        // as written, skipped when decoding.
        t->special_[id] = true;
        t->recognised_.push_back({piece, id});
        break;
      case SentencePieceModel::PieceType::kByte:
        if (auto b = BytePiece(piece); b.has_value()) t->token_bytes_[id] = std::string(1, *b);
        break;
      case SentencePieceModel::PieceType::kNormal:
      case SentencePieceModel::PieceType::kUnused:
        t->token_bytes_[id] = absl::StrReplaceAll(piece, {{kSpaceMarker, " "}});
        break;
    }
  }
  for (const SentencePieceAddedToken& a : options.added_tokens) {
    t->special_[a.id] = a.special;
    t->token_bytes_[a.id] = a.special ? "" : a.content;
    t->added_[a.content] = a.id;
    t->recognised_.push_back({a.content, a.id});
  }
  // Longest first, so that a token that starts another is tried after it.
  std::stable_sort(t->recognised_.begin(), t->recognised_.end(),
                   [](const Recognised& a, const Recognised& b) { return a.content.size() > b.content.size(); });
  for (const Recognised& r : t->recognised_) {
    if (!r.content.empty()) t->recognised_first_byte_[static_cast<unsigned char>(r.content[0])] = true;
  }
  return t;
}

std::string_view SentencePieceTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return token_bytes_[static_cast<size_t>(id)];
}

bool SentencePieceTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_[static_cast<size_t>(id)];
}

std::optional<int32_t> SentencePieceTokenizer::TokenId(std::string_view written) const {
  if (auto it = added_.find(absl::string_view(written.data(), written.size())); it != added_.end()) return it->second;
  const int32_t id = model_->PieceId(written);
  if (id < 0) return std::nullopt;
  return id;
}

std::string SentencePieceTokenizer::bos_piece() const { return model_->Piece(model_->bos_id()); }
std::string SentencePieceTokenizer::eos_piece() const { return model_->Piece(model_->eos_id()); }

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(std::string_view text) const {
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("text is not valid UTF-8");
  std::vector<int32_t> out;
  size_t segment_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const Recognised* match = nullptr;
    if (recognised_first_byte_[static_cast<unsigned char>(text[pos])]) {
      for (const Recognised& r : recognised_) {
        if (text.substr(pos).starts_with(r.content)) {
          match = &r;
          break;
        }
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    EncodeSegment(text.substr(segment_start, pos - segment_start), segment_start == 0, out);
    out.push_back(match->id);
    pos += match->content.size();
    segment_start = pos;
  }
  EncodeSegment(text.substr(segment_start), segment_start == 0, out);
  return out;
}

void SentencePieceTokenizer::EncodeSegment(std::string_view segment, bool at_start, std::vector<int32_t>& out) const {
  if (segment.empty()) return;
  if (legacy_) {
    const std::vector<int32_t> ids = model_->Encode(segment);
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  // transformers' non-legacy LlamaTokenizer: "▁" before the text, then a segment that
  // starts with a space is encoded after "<unk>" and the pieces of "<unk>" dropped, so that
  // the library's normalizer cannot treat its space as the start of a text.
  std::string text = at_start && add_prefix_space_
                         ? absl::StrCat(kSpaceMarker, absl::string_view(segment.data(), segment.size()))
                         : std::string(segment);
  if (!text.starts_with(kSpaceMarker) && !text.starts_with(" ")) {
    const std::vector<int32_t> ids = model_->Encode(text);
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  const std::vector<int32_t> ids = model_->Encode(absl::StrCat(model_->Piece(model_->unk_id()), text));
  const size_t skip = ids.size() >= unk_prefix_pieces_ ? unk_prefix_pieces_ : 0;
  out.insert(out.end(), ids.begin() + static_cast<std::ptrdiff_t>(skip), ids.end());
}

}  // namespace strata::text
