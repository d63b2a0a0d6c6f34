#include "storage/acked_writes.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace strata::storage {
namespace {

constexpr uint8_t kPut = 1;
constexpr uint8_t kDelete = 2;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
bool Get(std::string_view* in, T* v) {
  if (in->size() < sizeof(T)) return false;
  std::memcpy(v, in->data(), sizeof(T));
  in->remove_prefix(sizeof(T));
  return true;
}

}  // namespace

std::string AckedWrites::EncodeSlot(const State& state) {
  std::string out;
  Put(&out, kMagic);
  Put(&out, kVersion);
  Put(&out, uint32_t{0});  // used, filled in below
  Put(&out, uint32_t{0});
  Put(&out, state.generation);
  Put(&out, state.sequence);
  Put(&out, static_cast<uint32_t>(state.recent.size()));
  for (const Write& w : state.recent) {
    Put(&out, w.sequence);
    Put(&out, w.deleted ? kDelete : kPut);
    Put(&out, static_cast<uint32_t>(w.key.size()));
    out.append(w.key);
  }
  const auto used = static_cast<uint32_t>(out.size());
  std::memcpy(out.data() + 8, &used, sizeof(used));
  Put(&out, static_cast<uint64_t>(XXH3_64bits(out.data(), out.size())));
  return out;
}

absl::StatusOr<AckedWrites::State> AckedWrites::DecodeSlot(std::string_view bytes) {
  std::string_view in = bytes;
  uint32_t magic = 0, version = 0, used = 0, zero = 0, n = 0;
  if (!Get(&in, &magic) || magic != kMagic) return absl::DataLossError("not an acknowledged-writes slot");
  if (!Get(&in, &version) || version != kVersion) {
    return absl::DataLossError(absl::StrCat("acknowledged-writes slot version ", version, " is not ", kVersion));
  }
  if (!Get(&in, &used) || used < 36 || used + sizeof(uint64_t) > bytes.size()) {
    return absl::DataLossError("acknowledged-writes slot is truncated");
  }
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + used, sizeof(stored));
  if (XXH3_64bits(bytes.data(), used) != stored) return absl::DataLossError("acknowledged-writes slot checksum mismatch");
  in = bytes.substr(12, used - 12);
  State state;
  bool ok = Get(&in, &zero) && Get(&in, &state.generation) && Get(&in, &state.sequence) && Get(&in, &n) &&
            n <= kSlotBytes;
  for (uint32_t i = 0; ok && i < n; ++i) {
    Write w;
    uint8_t op = 0;
    uint32_t length = 0;
    ok = Get(&in, &w.sequence) && Get(&in, &op) && (op == kPut || op == kDelete) && Get(&in, &length) &&
         length <= in.size();
    if (!ok) break;
    w.deleted = op == kDelete;
    w.key.assign(in.substr(0, length));
    in.remove_prefix(length);
    state.recent.push_back(std::move(w));
  }
  if (!ok || !in.empty()) return absl::DataLossError("acknowledged-writes slot is malformed");
  return state;
}

absl::StatusOr<std::unique_ptr<AckedWrites>> AckedWrites::Open(const std::string& dir) {
  std::unique_ptr<AckedWrites> acked(new AckedWrites((std::filesystem::path(dir) / kFileName).string()));
  const int fd = ::open(acked->path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return acked;
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", acked->path_));
  }
  std::string bytes(2 * kSlotBytes, '\0');
  const ssize_t n = ::pread(fd, bytes.data(), bytes.size(), 0);
  const int err = errno;
  ::close(fd);
  if (n < 0) {
    errno = err;
    return absl::ErrnoToStatus(errno, absl::StrCat("read ", acked->path_));
  }
  bytes.resize(static_cast<size_t>(n));
  bool have = false;
  for (int slot = 0; slot < 2; ++slot) {
    const size_t at = static_cast<size_t>(slot * kSlotBytes);
    if (bytes.size() <= at) break;
    absl::StatusOr<State> s = DecodeSlot(std::string_view(bytes).substr(at, kSlotBytes));
    if (s.ok() && (!have || s->generation > acked->found_.generation)) {
      acked->found_ = *std::move(s);
      have = true;
    }
  }
  acked->state_ = acked->found_;
  return acked;
}

AckedWrites::~AckedWrites() {
  if (fd_ >= 0) ::close(fd_);
}

void AckedWrites::Lost(uint64_t recovered, int64_t* lost, std::vector<Write>* named) const {
  named->clear();
  *lost = found_.sequence > recovered ? static_cast<int64_t>(found_.sequence - recovered) : 0;
  if (*lost == 0) return;
  for (const Write& w : found_.recent) {
    if (w.sequence > recovered) named->push_back(w);
  }
}

absl::Status AckedWrites::Record(uint64_t sequence, bool deleted, std::string_view key) {
  state_.sequence = sequence;
  state_.recent.push_back(Write{sequence, deleted, std::string(key)});
  if (state_.recent.size() > kRecentKeys) state_.recent.erase(state_.recent.begin());
  // Long keys: keep fewer (the count of lost writes does not depend on them).
  while (!state_.recent.empty() && static_cast<int64_t>(EncodeSlot(state_).size()) > kSlotBytes) {
    state_.recent.erase(state_.recent.begin());
  }
  ++state_.generation;
  return WriteSlot();
}

absl::Status AckedWrites::Reset(uint64_t sequence) {
  state_.sequence = sequence;
  state_.recent.clear();
  for (int i = 0; i < 2; ++i) {
    ++state_.generation;
    if (absl::Status s = WriteSlot(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status AckedWrites::WriteSlot() {
  if (fd_ < 0) {
    const bool existed = std::filesystem::exists(path_);
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path_));
    if (!existed) {
      // Both slots' room at once (later writes change no metadata), and the new name made
      // durable in the directory.
      if (::ftruncate(fd_, 2 * kSlotBytes) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("ftruncate ", path_));
      const std::string dir = std::filesystem::path(path_).parent_path().string();
      const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
      }
    }
  }
  std::string slot = EncodeSlot(state_);
  slot.resize(static_cast<size_t>(kSlotBytes), '\0');
  const off_t at = static_cast<off_t>(state_.generation % 2) * kSlotBytes;
  const ssize_t n = ::pwrite(fd_, slot.data(), slot.size(), at);
  if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("pwrite ", path_));
  if (n != static_cast<ssize_t>(slot.size())) return absl::UnavailableError(absl::StrCat("pwrite ", path_, ": short"));
  if (::fdatasync(fd_) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("fdatasync ", path_));
  return absl::OkStatus();
}

}  // namespace strata::storage
