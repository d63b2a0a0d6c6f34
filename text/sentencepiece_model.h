// SentencePieceModel: the SentencePiece library's processor behind a plain C++
// interface.
//
// Debian's sentencepiece_processor.h declares `namespace absl { using
// std::string_view; }` while Debian's Abseil defines its own class
// absl::string_view: the two cannot meet in one translation unit.
// sentencepiece_model.cc is the one file that includes the library's header,
// and it includes no Abseil header; this header includes neither, so the rest
// of strata uses the library through it.
#ifndef STRATA_TEXT_SENTENCEPIECE_MODEL_H_
#define STRATA_TEXT_SENTENCEPIECE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace strata::text {

// Thread-safe after construction: every method is const (the library's encoder
// keeps no state between calls).
class SentencePieceModel {
 public:
  // True when strata was built with the SentencePiece library. Without it Load
  // always fails and says so.
  static bool Available();

  // Loads the bytes of a tokenizer.model (a serialized sentencepiece
  // ModelProto). With `add_dummy_prefix` false the model's normalizer does not
  // prepend "▁" to the text (transformers' non-legacy LlamaTokenizer loads the
  // model that way). Returns null and sets `*error` (never null) when the bytes
  // are not a model the library accepts or the library is absent.
  static std::unique_ptr<SentencePieceModel> Load(std::string_view serialized, bool add_dummy_prefix,
                                                  std::string *error);
  ~SentencePieceModel();

  // The number of pieces; IDs are 0 .. piece_count() - 1.
  int piece_count() const;
  // The library's encoding of `text` (its normalizer, then its segmentation:
  // BPE or unigram, byte fallback). No BOS or EOS.
  std::vector<int32_t> Encode(std::string_view text) const;
  // The piece as the model spells it ("▁the", "<0x0A>", "<s>"); empty for an ID
  // outside the vocabulary.
  const std::string &Piece(int32_t id) const;
  // The ID of a piece spelled as in the model; -1 when the model has no such
  // piece.
  int32_t PieceId(std::string_view piece) const;

  enum class PieceType { kNormal, kUnknown, kControl, kUnused, kByte };
  PieceType Type(int32_t id) const;
  // The reserved pieces' IDs; -1 where the model defines none.
  int32_t unk_id() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t pad_id() const;

 private:
  SentencePieceModel();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_SENTENCEPIECE_MODEL_H_
