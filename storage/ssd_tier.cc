#include "storage/ssd_tier.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/mutex.h"
#include "storage/write_journal.h"

namespace strata::storage {
namespace {

constexpr int64_t kAlign = 4096;
constexpr int64_t kMaxRegisteredIovec = int64_t{1} << 30;  // the kernel's limit per buffer
constexpr size_t kMaxSamples = 8192;
// How long the completion thread waits for a completion before it submits again what a
// failed io_uring_submit left in the ring.
constexpr absl::Duration kResubmitAfter = absl::Milliseconds(100);
constexpr const char* kFileName = "strata-ssd.data";

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

}  // namespace

class SsdTier::Impl {
 public:
  struct File {
    std::string path;
    int fd = -1;
    uint64_t blocks = 0;
    int64_t found_bytes = 0;  // the file's size when it was opened (0: created then)
    std::set<uint64_t> free;  // free block indices; the lowest is handed out first
  };
  struct Request {
    Callback done;
    bool write = false;
    int fd = -1;
    std::byte* buf = nullptr;
    uint64_t offset = 0;
    int64_t bytes = 0;  // block_bytes, or a header page's
    absl::Time start;
  };

  Impl(const SsdTierOptions& options) : options_(options), failed_submits_(options.failed_submits_for_testing) {}

  ~Impl() {
    if (ring_ready_) {
      {
        MutexLock lock(&sub_mu_);
        sub_mu_.Await(
            [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sub_mu_) { return inflight_ == 0 && waiting_.empty(); });
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, nullptr);  // tells the reaper to stop
        SubmitLocked();
      }
      reaper_.join();
      io_uring_queue_exit(&ring_);
    }
    for (File& f : files_) {
      if (f.fd >= 0) close(f.fd);
    }
  }

  absl::Status Open() {
    if (options_.dirs.empty()) return absl::InvalidArgumentError("the SSD tier needs a directory");
    if (options_.block_bytes <= 0 || options_.block_bytes % kAlign != 0) {
      return absl::InvalidArgumentError(absl::StrCat("SSD block size ", options_.block_bytes,
                                                     " is not a positive multiple of ", kAlign));
    }
    const uint64_t blocks = static_cast<uint64_t>(options_.capacity_bytes_per_dir / options_.block_bytes);
    if (blocks == 0) {
      return absl::InvalidArgumentError(absl::StrCat("SSD capacity per directory (", options_.capacity_bytes_per_dir,
                                                     " bytes) holds no block of ", options_.block_bytes));
    }
    if (options_.queue_depth < 1 || options_.queue_depth > 4096) {
      return absl::InvalidArgumentError(absl::StrCat("SSD queue depth ", options_.queue_depth, " is not in [1, 4096]"));
    }
    for (const std::string& dir : options_.dirs) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) return absl::InternalError(absl::StrCat("cannot create SSD directory ", dir, ": ", ec.message()));
      File f;
      f.path = (std::filesystem::path(dir) / kFileName).string();
      f.fd = open(f.path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
      if (f.fd < 0 && errno == EINVAL) {
        LOG(WARNING) << dir << " does not support O_DIRECT; the SSD tier uses the page cache there";
        f.fd = open(f.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
      }
      if (f.fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", f.path));
      f.blocks = blocks;
      const off_t bytes = static_cast<off_t>(blocks * static_cast<uint64_t>(options_.block_bytes));
      files_.push_back(std::move(f));  // closed by ~Impl from here on
      File& file = files_.back();
      struct stat st;
      if (fstat(file.fd, &st) != 0) return ErrnoStatus(errno, absl::StrCat("cannot stat ", file.path));
      file.found_bytes = static_cast<int64_t>(st.st_size);
      // fallocate keeps existing bytes (a warm restart reads them back) and extends.
      if (fallocate(file.fd, 0, 0, bytes) != 0) {
        const int err = errno;
        if (err != ENOSPC && err != EOPNOTSUPP && err != EDQUOT) {
          return ErrnoStatus(err, absl::StrCat("cannot preallocate ", file.path));
        }
        if (st.st_size < bytes && ftruncate(file.fd, bytes) != 0) {
          return ErrnoStatus(errno, absl::StrCat("cannot size ", file.path));
        }
        preallocated_ = false;
        LOG(WARNING) << "cannot preallocate " << bytes << " bytes for " << file.path << " ("
                     << std::strerror(err) << "); writes there may fail for lack of space";
      }
      for (uint64_t b = 0; b < blocks; ++b) file.free.insert(file.free.end(), b);
      free_blocks_ += static_cast<int64_t>(blocks);
    }
    total_blocks_ = free_blocks_;
    const unsigned entries = static_cast<unsigned>(options_.queue_depth);
    if (int rc = io_uring_queue_init(entries, &ring_, 0); rc < 0) {
      // ENOSYS/EPERM: the kernel has io_uring but this process may not use it, which is
      // what a container runtime's default seccomp profile does; say how to go on.
      const bool refused = rc == -ENOSYS || rc == -EPERM;
      return absl::UnavailableError(absl::StrCat(
          "cannot set up io_uring: ", std::strerror(-rc),
          refused ? " (io_uring is refused here: a container's default seccomp profile or the "
                    "kernel.io_uring_disabled sysctl; allow it, e.g. deploy/docker/seccomp.json, or run "
                    "without --ssd_dirs)"
                  : ""));
    }
    ring_ready_ = true;
    reaper_ = std::thread([this] { Reap(); });
    return absl::OkStatus();
  }

  absl::Status RegisterBuffers(std::byte* base, int64_t bytes) {
    if (base == nullptr || bytes <= 0) return absl::InvalidArgumentError("no buffer to register");
    // Each iovec a whole number of blocks, so no block of the arena straddles two.
    const int64_t per = std::max<int64_t>(options_.block_bytes,
                                          kMaxRegisteredIovec / options_.block_bytes * options_.block_bytes);
    std::vector<iovec> iov;
    for (int64_t off = 0; off < bytes; off += per) {
      iov.push_back(iovec{base + off, static_cast<size_t>(std::min(per, bytes - off))});
    }
    MutexLock lock(&sub_mu_);
    if (!registered_.empty()) return absl::FailedPreconditionError("buffers are already registered");
    if (int rc = io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(iov.size())); rc < 0) {
      return absl::UnavailableError(absl::StrCat("io_uring_register_buffers of ", bytes, " bytes: ", std::strerror(-rc)));
    }
    registered_ = std::move(iov);
    return absl::OkStatus();
  }

  std::optional<SsdLocation> Allocate() {
    MutexLock lock(&alloc_mu_);
    for (size_t tried = 0; tried < files_.size(); ++tried) {
      const uint32_t f = next_file_;
      next_file_ = static_cast<uint32_t>((next_file_ + 1) % files_.size());
      File& file = files_[f];
      if (file.free.empty()) continue;
      const uint64_t b = *file.free.begin();
      file.free.erase(file.free.begin());
      --free_blocks_;
      return SsdLocation{f, b * static_cast<uint64_t>(options_.block_bytes)};
    }
    return std::nullopt;
  }

  void Free(const SsdLocation& loc) {
    if (!IsValidLocation(loc)) {
      LOG(ERROR) << "freeing an invalid SSD location " << loc.file << ":" << loc.offset;
      return;
    }
    MutexLock lock(&alloc_mu_);
    if (files_[loc.file].free.insert(loc.offset / static_cast<uint64_t>(options_.block_bytes)).second) {
      ++free_blocks_;
    } else {
      LOG(ERROR) << "SSD block " << loc.file << ":" << loc.offset << " freed twice";
    }
  }

  bool MarkAllocated(const SsdLocation& loc) {
    if (!IsValidLocation(loc)) return false;
    MutexLock lock(&alloc_mu_);
    if (files_[loc.file].free.erase(loc.offset / static_cast<uint64_t>(options_.block_bytes)) == 0) return false;
    --free_blocks_;
    return true;
  }

  bool IsValidLocation(const SsdLocation& loc) const {
    if (loc.file >= files_.size()) return false;
    const uint64_t bb = static_cast<uint64_t>(options_.block_bytes);
    return loc.offset % bb == 0 && loc.offset / bb < files_[loc.file].blocks;
  }

  bool FoundAtOpen(const SsdLocation& loc) const {
    if (!IsValidLocation(loc)) return false;
    return static_cast<int64_t>(loc.offset) + options_.block_bytes <= files_[loc.file].found_bytes;
  }

  std::vector<SsdLocation> LocationsFoundAtOpen() const {
    std::vector<SsdLocation> out;
    const uint64_t bb = static_cast<uint64_t>(options_.block_bytes);
    for (uint32_t f = 0; f < files_.size(); ++f) {
      const uint64_t found = std::min<uint64_t>(files_[f].blocks, static_cast<uint64_t>(files_[f].found_bytes) / bb);
      for (uint64_t b = 0; b < found; ++b) out.push_back(SsdLocation{f, b * bb});
    }
    return out;
  }

  void Submit(bool write, const SsdLocation& loc, std::byte* buf, int64_t bytes, Callback done) {
    if (!IsValidLocation(loc) || reinterpret_cast<uintptr_t>(buf) % kAlign != 0) {
      done(absl::InvalidArgumentError("SSD I/O with a bad location or an unaligned buffer"));
      return;
    }
    if (bytes <= 0 || bytes % kAlign != 0 || bytes > options_.block_bytes) {
      done(absl::InvalidArgumentError(absl::StrCat("SSD I/O of ", bytes, " bytes is not whole pages of a block")));
      return;
    }
    if (write && options_.journal != nullptr) {
      // The whole block's old bytes, also for a partial write: a later whole-block write
      // before the next sync finds its pre-image already taken.
      options_.journal->BeforeBlockWrite(files_[loc.file].path, loc.offset, options_.block_bytes);
    }
    auto* req = new Request{std::move(done), write, files_[loc.file].fd, buf, loc.offset, bytes, absl::Now()};
    MutexLock lock(&sub_mu_);
    // Past queue_depth the request waits in line; the completion thread starts it when a
    // slot frees, so the caller never waits, for the disk or for a slot.
    if (inflight_ >= options_.queue_depth) {
      waiting_.push_back(req);
      return;
    }
    PrepareLocked(req);
    SubmitLocked();
  }

  absl::Status Sync() {
    const uint64_t mark = options_.journal != nullptr ? options_.journal->Mark() : 0;
    for (const File& f : files_) {
      if (fdatasync(f.fd) != 0) return ErrnoStatus(errno, absl::StrCat("fdatasync ", f.path));
      if (options_.journal != nullptr) options_.journal->SyncedData(f.path, mark);
    }
    return absl::OkStatus();
  }

  std::vector<SsdIoSample> TakeIoSamples() {
    MutexLock lock(&sample_mu_);
    std::vector<SsdIoSample> out(samples_.begin(), samples_.end());
    samples_.clear();
    return out;
  }

  int64_t free_blocks() {
    MutexLock lock(&alloc_mu_);
    return free_blocks_;
  }

  const SsdTierOptions options_;
  int64_t total_blocks_ = 0;
  bool preallocated_ = true;

 private:
  int RegisteredIndexLocked(const std::byte* buf) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(sub_mu_) {
    for (size_t i = 0; i < registered_.size(); ++i) {
      auto* base = static_cast<const std::byte*>(registered_[i].iov_base);
      if (buf >= base && buf + options_.block_bytes <= base + registered_[i].iov_len) return static_cast<int>(i);
    }
    return -1;
  }

  // Fills one SQE for `req`; SubmitLocked() hands the prepared ones to the kernel.
  void PrepareLocked(Request* req) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sub_mu_) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never null: at most queue_depth in flight
    const unsigned len = static_cast<unsigned>(req->bytes);
    const int index = RegisteredIndexLocked(req->buf);
    if (index >= 0) {
      if (req->write) {
        io_uring_prep_write_fixed(sqe, req->fd, req->buf, len, req->offset, index);
      } else {
        io_uring_prep_read_fixed(sqe, req->fd, req->buf, len, req->offset, index);
      }
    } else if (req->write) {
      io_uring_prep_write(sqe, req->fd, req->buf, len, req->offset);
    } else {
      io_uring_prep_read(sqe, req->fd, req->buf, len, req->offset);
    }
    io_uring_sqe_set_data(sqe, req);
    ++inflight_;
  }

  void SubmitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sub_mu_) {
    int rc = 0;
    if (failed_submits_ > 0) {
      --failed_submits_;
      rc = -EBUSY;
    } else {
      rc = io_uring_submit(&ring_);
    }
    if (rc < 0) {
      // The SQEs stay queued: the reaper submits them again when it finds no completion
      // for kResubmitAfter (nothing else may come to submit them).
      LOG_EVERY_N_SEC(WARNING, 10) << "io_uring_submit: " << std::strerror(-rc) << " (submitted again shortly)";
    }
  }

  // Waits for a completion. Where the kernel takes a timeout without an SQE of its own
  // (IORING_FEAT_EXT_ARG, Linux 5.11+), it waits kResubmitAfter at a time and submits what
  // a failed submit left in the ring.
  int WaitCqe(io_uring_cqe** first) {
    if ((ring_.features & IORING_FEAT_EXT_ARG) == 0) return io_uring_wait_cqe(&ring_, first);
    for (;;) {
      __kernel_timespec ts{0, absl::ToInt64Nanoseconds(kResubmitAfter)};
      const int rc = io_uring_wait_cqe_timeout(&ring_, first, &ts);
      if (rc != -ETIME) return rc;
      MutexLock lock(&sub_mu_);
      if (io_uring_sq_ready(&ring_) > 0) SubmitLocked();
    }
  }

  // The completion thread: takes every completion that is ready, refills the ring from the
  // waiting line in one submit, then runs the callbacks.
  void Reap() {
    std::vector<io_uring_cqe*> cqes(static_cast<size_t>(options_.queue_depth) + 1);
    std::vector<std::pair<Request*, int>> done;
    for (;;) {
      io_uring_cqe* first = nullptr;
      int rc = WaitCqe(&first);
      if (rc == -EINTR) continue;
      if (rc < 0) {
        LOG(ERROR) << "io_uring_wait_cqe: " << std::strerror(-rc);
        continue;
      }
      const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes.data(), static_cast<unsigned>(cqes.size()));
      bool stop = false;
      done.clear();
      for (unsigned i = 0; i < n; ++i) {
        auto* req = static_cast<Request*>(io_uring_cqe_get_data(cqes[i]));
        if (req == nullptr) {
          stop = true;  // the destructor's NOP: nothing is in flight or waiting
        } else {
          done.emplace_back(req, cqes[i]->res);
        }
      }
      io_uring_cq_advance(&ring_, n);
      if (!done.empty()) {
        MutexLock lock(&sub_mu_);
        inflight_ -= static_cast<int>(done.size());
        bool prepared = false;
        while (inflight_ < options_.queue_depth && !waiting_.empty()) {
          PrepareLocked(waiting_.front());
          waiting_.pop_front();
          prepared = true;
        }
        if (prepared) SubmitLocked();
      }
      const absl::Time now = absl::Now();
      {
        MutexLock lock(&sample_mu_);
        for (const auto& [req, res] : done) {
          if (samples_.size() >= kMaxSamples) samples_.pop_front();
          samples_.push_back(SsdIoSample{req->write, req->bytes, absl::ToDoubleSeconds(now - req->start)});
        }
      }
      for (const auto& [req, res] : done) {
        absl::Status status;
        if (res < 0) {
          status = ErrnoStatus(-res, req->write ? "SSD write" : "SSD read");
        } else if (res != req->bytes) {
          status = absl::DataLossError(
              absl::StrCat(req->write ? "short SSD write: " : "short SSD read: ", res, " of ", req->bytes, " bytes"));
        }
        req->done(std::move(status));
        delete req;
      }
      if (stop) return;
    }
  }

  std::vector<File> files_;
  Mutex alloc_mu_;
  uint32_t next_file_ ABSL_GUARDED_BY(alloc_mu_) = 0;
  int64_t free_blocks_ ABSL_GUARDED_BY(alloc_mu_) = 0;

  io_uring ring_{};
  bool ring_ready_ = false;
  Mutex sub_mu_;
  int inflight_ ABSL_GUARDED_BY(sub_mu_) = 0;
  int failed_submits_ ABSL_GUARDED_BY(sub_mu_) = 0;  // SsdTierOptions::failed_submits_for_testing
  std::deque<Request*> waiting_ ABSL_GUARDED_BY(sub_mu_);  // past queue_depth, in arrival order
  std::vector<iovec> registered_ ABSL_GUARDED_BY(sub_mu_);
  std::thread reaper_;

  Mutex sample_mu_;
  std::deque<SsdIoSample> samples_ ABSL_GUARDED_BY(sample_mu_);
};

absl::StatusOr<std::unique_ptr<SsdTier>> SsdTier::Open(const SsdTierOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  if (absl::Status s = impl->Open(); !s.ok()) return s;
  return std::unique_ptr<SsdTier>(new SsdTier(std::move(impl)));
}

SsdTier::SsdTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SsdTier::~SsdTier() = default;

absl::Status SsdTier::RegisterBuffers(std::byte* base, int64_t bytes) { return impl_->RegisterBuffers(base, bytes); }
std::optional<SsdLocation> SsdTier::Allocate() { return impl_->Allocate(); }
void SsdTier::Free(const SsdLocation& loc) { impl_->Free(loc); }
bool SsdTier::MarkAllocated(const SsdLocation& loc) { return impl_->MarkAllocated(loc); }
bool SsdTier::IsValidLocation(const SsdLocation& loc) const { return impl_->IsValidLocation(loc); }
bool SsdTier::FoundAtOpen(const SsdLocation& loc) const { return impl_->FoundAtOpen(loc); }
std::vector<SsdLocation> SsdTier::LocationsFoundAtOpen() const { return impl_->LocationsFoundAtOpen(); }
void SsdTier::Write(const SsdLocation& loc, const std::byte* src, Callback done) {
  impl_->Submit(true, loc, const_cast<std::byte*>(src), block_bytes(), std::move(done));
}
void SsdTier::Read(const SsdLocation& loc, std::byte* dst, Callback done) {
  impl_->Submit(false, loc, dst, block_bytes(), std::move(done));
}
void SsdTier::Write(const SsdLocation& loc, const std::byte* src, int64_t bytes, Callback done) {
  impl_->Submit(true, loc, const_cast<std::byte*>(src), bytes, std::move(done));
}
void SsdTier::Read(const SsdLocation& loc, std::byte* dst, int64_t bytes, Callback done) {
  impl_->Submit(false, loc, dst, bytes, std::move(done));
}
absl::Status SsdTier::Sync() { return impl_->Sync(); }
std::vector<SsdIoSample> SsdTier::TakeIoSamples() { return impl_->TakeIoSamples(); }
int64_t SsdTier::block_bytes() const { return impl_->options_.block_bytes; }
int64_t SsdTier::total_blocks() const { return impl_->total_blocks_; }
int64_t SsdTier::free_blocks() const { return impl_->free_blocks(); }
bool SsdTier::preallocated() const { return impl_->preallocated_; }

}  // namespace strata::storage
