// The one translation unit that includes the SentencePiece library's header (see
// sentencepiece_model.h): no Abseil header may be included here.
#include "text/sentencepiece_model.h"

#if STRATA_HAS_SENTENCEPIECE
#include <dlfcn.h>
#include <sentencepiece_processor.h>

#include <new>
#endif

namespace strata::text {

#if STRATA_HAS_SENTENCEPIECE

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// The library, opened once for the life of the process, and the two of its functions that
// are not virtual methods of the processor (everything else is reached through the
// processor's vtable, so nothing of the library is linked).
struct Library {
  void (*construct)(void*) = nullptr;                 // SentencePieceProcessor::SentencePieceProcessor()
  void (*destroy_status)(void*) = nullptr;            // util::Status::~Status()
  std::string (*status_text)(const void*) = nullptr;  // util::Status::ToString()
  std::string unavailable;                            // why not, when construct is null
};

const Library& OpenLibrary() {
  static const Library* const library = [] {
    auto* lib = new Library();
    // A sanitizer build cannot deep-bind: without it the library's protobuf would bind to
    // libprotobuf's, whose version check aborts the process.
    if (kSanitized && dlsym(RTLD_DEFAULT, "_ZN6google8protobuf8internal13VerifyVersionEiiPKc") != nullptr) {
      lib->unavailable =
          "this is a sanitizer build, whose runtime refuses RTLD_DEEPBIND, and the SentencePiece library's own "
          "protobuf cannot share a process with libprotobuf without it";
      return lib;
    }
    const int flags = RTLD_NOW | RTLD_LOCAL | (kSanitized ? 0 : RTLD_DEEPBIND);
    void* handle = dlopen("libsentencepiece.so.0", flags);
    if (handle == nullptr) handle = dlopen("libsentencepiece.so", flags);
    if (handle == nullptr) {
      lib->unavailable = std::string("cannot open the SentencePiece library: ") + dlerror();
      return lib;
    }
    lib->construct = reinterpret_cast<void (*)(void*)>(dlsym(handle, "_ZN13sentencepiece22SentencePieceProcessorC1Ev"));
    lib->destroy_status = reinterpret_cast<void (*)(void*)>(dlsym(handle, "_ZN13sentencepiece4util6StatusD1Ev"));
    lib->status_text = reinterpret_cast<std::string (*)(const void*)>(
        dlsym(handle, "_ZNK13sentencepiece4util6Status8ToStringB5cxx11Ev"));
    if (lib->construct == nullptr || lib->destroy_status == nullptr || lib->status_text == nullptr) {
      lib->construct = nullptr;
      lib->unavailable = "the SentencePiece library lacks the processor's constructor or Status methods";
    }
    return lib;
  }();
  return *library;
}

// A util::Status returned by a virtual method, destroyed through the library.
class ScopedStatus {
 public:
  template <typename Call>
  explicit ScopedStatus(Call call) {
    new (storage_) sentencepiece::util::Status(call());
  }
  ~ScopedStatus() { OpenLibrary().destroy_status(storage_); }
  bool ok() const { return status().ok(); }
  std::string text() const { return OpenLibrary().status_text(storage_); }

 private:
  const sentencepiece::util::Status& status() const {
    return *std::launder(reinterpret_cast<const sentencepiece::util::Status*>(storage_));
  }
  alignas(sentencepiece::util::Status) unsigned char storage_[sizeof(sentencepiece::util::Status)];
};

// A serialized protobuf message followed by another of the same type parses as their
// merge, so appending a ModelProto that holds only normalizer_spec (field 3) with
// add_dummy_prefix (its field 3) = false switches the dummy prefix off without the
// ModelProto classes, which Debian's package does not install.
constexpr char kNoDummyPrefix[] = {0x1A, 0x02, 0x18, 0x00};

}  // namespace

bool SentencePieceModel::Available(std::string* why) {
  const Library& lib = OpenLibrary();
  if (lib.construct == nullptr && why != nullptr) *why = lib.unavailable;
  return lib.construct != nullptr;
}

SentencePieceModel::~SentencePieceModel() { delete processor_; }  // virtual: the library's destructor

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(std::string_view serialized, bool add_dummy_prefix,
                                                             std::string* error) {
  const Library& lib = OpenLibrary();
  if (lib.construct == nullptr) {
    *error = lib.unavailable;
    return nullptr;
  }
  std::unique_ptr<SentencePieceModel> model(new SentencePieceModel());
  void* memory = ::operator new(sizeof(sentencepiece::SentencePieceProcessor));
  lib.construct(memory);
  model->processor_ = static_cast<sentencepiece::SentencePieceProcessor*>(memory);

  std::string bytes(serialized);
  if (!add_dummy_prefix) bytes.append(kNoDummyPrefix, sizeof(kNoDummyPrefix));
  const ScopedStatus status([&] { return model->processor_->LoadFromSerializedProto(bytes); });
  if (!status.ok()) {
    *error = status.text();
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
  const ScopedStatus status([&] { return processor_->Encode(text, &ids); });
  return std::vector<int32_t>(ids.begin(), ids.end());
}

const std::string& SentencePieceModel::Piece(int32_t id) const {
  static const std::string* const kNone = new std::string();
  if (id < 0 || id >= piece_count()) return *kNone;
  return processor_->IdToPiece(id);
}

int32_t SentencePieceModel::PieceId(std::string_view piece) const {
  const int id = processor_->PieceToId(piece);
  // PieceToId answers unk_id for a piece it does not know; only "<unk>" itself is unk.
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

#else  // !STRATA_HAS_SENTENCEPIECE

namespace {
constexpr char kNotBuilt[] =
    "strata was built without the SentencePiece library (install libsentencepiece-dev and rebuild)";
}  // namespace

bool SentencePieceModel::Available(std::string* why) {
  if (why != nullptr) *why = kNotBuilt;
  return false;
}

SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(std::string_view, bool, std::string* error) {
  *error = kNotBuilt;
  return nullptr;
}

// Unreachable: no model exists without the library.
int SentencePieceModel::piece_count() const { return 0; }
std::vector<int32_t> SentencePieceModel::Encode(std::string_view) const { return {}; }
const std::string& SentencePieceModel::Piece(int32_t) const {
  static const std::string* const kNone = new std::string();
  return *kNone;
}
int32_t SentencePieceModel::PieceId(std::string_view) const { return -1; }
SentencePieceModel::PieceType SentencePieceModel::Type(int32_t) const { return PieceType::kNormal; }
int32_t SentencePieceModel::unk_id() const { return -1; }
int32_t SentencePieceModel::bos_id() const { return -1; }
int32_t SentencePieceModel::eos_id() const { return -1; }

#endif  // STRATA_HAS_SENTENCEPIECE

}  // namespace strata::text
