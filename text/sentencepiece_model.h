// SentencePieceModel: the SentencePiece library's processor behind a plain C++ interface.
//
// Two clashes keep the library at arm's length, both in Debian 12's packages:
//   - sentencepiece_processor.h declares `namespace absl { using std::string_view; }`
//     while Debian's Abseil defines its own class absl::string_view, so the two cannot
//     meet in one translation unit: sentencepiece_model.cc is the one file that includes
//     the library's header, it includes no Abseil header, and this header neither.
//   - libsentencepiece.so carries its own protobuf 3.14 and exports its symbols; linked
//     beside the system's libprotobuf 3.21 (which gRPC brings into strata) the two copies
//     interpose and the process aborts at start ("compiled against version 3.14.0").
//     So strata does not link the library: Load opens it with dlopen(RTLD_LOCAL |
//     RTLD_DEEPBIND), which keeps its protobuf its own, and reaches the processor through
//     its virtual methods. Sanitizer runtimes refuse RTLD_DEEPBIND: a sanitizer build
//     opens it without, which is safe only in a process with no libprotobuf, and in one
//     with libprotobuf (the server) reports the library unavailable and says why.
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

// Thread-safe after construction: every method is const (the library's encoder keeps no
// state between calls). Available and Load may be called from any thread.
class SentencePieceModel {
 public:
  // True when this process can use the SentencePiece library (see the file comment).
  // Otherwise false, and `*why` (may be null) says why: strata was built without
  // libsentencepiece-dev, the library could not be opened, or a sanitizer build shares
  // the process with libprotobuf.
  static bool Available(std::string* why = nullptr);

  // Loads the bytes of a tokenizer.model (a serialized sentencepiece ModelProto). With
  // `add_dummy_prefix` false the model's normalizer does not prepend "▁" to the text
  // (transformers' non-legacy LlamaTokenizer loads the model that way). Returns null and
  // sets `*error` (never null) when the bytes are not a model the library accepts or the
  // library is not available.
  static std::unique_ptr<SentencePieceModel> Load(std::string_view serialized, bool add_dummy_prefix,
                                                  std::string* error);
  ~SentencePieceModel();

  // The number of pieces; IDs are 0 .. piece_count() - 1.
  int piece_count() const;
  // The library's encoding of `text` (its normalizer, then its segmentation: BPE or
  // unigram, byte fallback). No BOS or EOS.
  std::vector<int32_t> Encode(std::string_view text) const;
  // The piece as the model spells it ("▁the", "<0x0A>", "<s>"); empty for an ID outside
  // the vocabulary.
  const std::string& Piece(int32_t id) const;
  // The ID of a piece spelled as in the model; -1 when the model has no such piece.
  int32_t PieceId(std::string_view piece) const;

  enum class PieceType { kNormal, kUnknown, kControl, kUnused, kByte };
  PieceType Type(int32_t id) const;
  // The reserved pieces' IDs; -1 where the model defines none.
  int32_t unk_id() const;
  int32_t bos_id() const;
  int32_t eos_id() const;

 private:
  SentencePieceModel() = default;
  // Owned; built and destroyed through the opened library (sentencepiece_model.cc).
  sentencepiece::SentencePieceProcessor* processor_ = nullptr;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_SENTENCEPIECE_MODEL_H_
