// The one translation unit that includes the SentencePiece library's header
// (see sentencepiece_model.h): no Abseil header may be included here.
#include "text/sentencepiece_model.h"

#if STRATA_HAS_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace strata::text {

#if STRATA_HAS_SENTENCEPIECE

namespace {

// A serialized protobuf message followed by another of the same type parses as
// their merge, so appending a ModelProto that holds only normalizer_spec (field
// 3) with add_dummy_prefix (its field 3) = false switches the dummy prefix off
// without the ModelProto classes, which Debian's package does not install.
constexpr char kNoDummyPrefix[] = {0x1A, 0x02, 0x18, 0x00};

}  // namespace

bool SentencePieceModel::Available() { return true; }

SentencePieceModel::SentencePieceModel() : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(std::string_view serialized, bool add_dummy_prefix,
                                                             std::string *error) {
  std::string bytes(serialized);
  if (!add_dummy_prefix) bytes.append(kNoDummyPrefix, sizeof(kNoDummyPrefix));
  std::unique_ptr<SentencePieceModel> model(new SentencePieceModel());
  const sentencepiece::util::Status status = model->processor_->LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  if (model->piece_count() <= 0) {
    *error = "the model has no pieces";
    return nullptr;
  }
  return model;
}

int SentencePieceModel::piece_count() const { return processor_->GetPieceSize(); }

std::vector<int32_t> SentencePieceModel::Encode(std::string_view text) const {
  std::vector<int> ids;
  // Fails only for an unloaded model, which Load never returns.
  processor_->Encode(text, &ids).IgnoreError();
  return std::vector<int32_t>(ids.begin(), ids.end());
}

const std::string &SentencePieceModel::Piece(int32_t id) const {
  static const std::string *const kNone = new std::string();
  if (id < 0 || id >= piece_count()) return *kNone;
  return processor_->IdToPiece(id);
}

int32_t SentencePieceModel::PieceId(std::string_view piece) const {
  const int id = processor_->PieceToId(piece);
  // PieceToId answers unk_id for a piece it does not know; only "<unk>" itself
  // is unk.
  if (id == processor_->unk_id() && processor_->IdToPiece(id) != piece) return -1;
  return id;
}

SentencePieceModel::PieceType SentencePieceModel::Type(int32_t id) const {
  if (processor_->IsUnknown(id)) return PieceType::kUnknown;
  if (processor_->IsControl(id)) return PieceType::kControl;
  if (processor_->IsUnused(id)) return PieceType::kUnused;
  if (processor_->IsByte(id)) return PieceType::kByte;
  return PieceType::kNormal;
}

int32_t SentencePieceModel::unk_id() const { return processor_->unk_id(); }
int32_t SentencePieceModel::bos_id() const { return processor_->bos_id(); }
int32_t SentencePieceModel::eos_id() const { return processor_->eos_id(); }
int32_t SentencePieceModel::pad_id() const { return processor_->pad_id(); }

#else  // !STRATA_HAS_SENTENCEPIECE

bool SentencePieceModel::Available() { return false; }

SentencePieceModel::SentencePieceModel() = default;
SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(std::string_view, bool, std::string *error) {
  *error =
      "strata was built without the SentencePiece library (install "
      "libsentencepiece-dev and rebuild to read "
      "tokenizer.model)";
  return nullptr;
}

// Unreachable: no model exists without the library.
int SentencePieceModel::piece_count() const { return 0; }
std::vector<int32_t> SentencePieceModel::Encode(std::string_view) const { return {}; }
const std::string &SentencePieceModel::Piece(int32_t) const {
  static const std::string *const kNone = new std::string();
  return *kNone;
}
int32_t SentencePieceModel::PieceId(std::string_view) const { return -1; }
SentencePieceModel::PieceType SentencePieceModel::Type(int32_t) const { return PieceType::kNormal; }
int32_t SentencePieceModel::unk_id() const { return -1; }
int32_t SentencePieceModel::bos_id() const { return -1; }
int32_t SentencePieceModel::eos_id() const { return -1; }
int32_t SentencePieceModel::pad_id() const { return -1; }

#endif  // STRATA_HAS_SENTENCEPIECE

}  // namespace strata::text
