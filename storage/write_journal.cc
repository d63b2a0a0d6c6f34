#include "storage/write_journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "rocksdb/file_system.h"

namespace strata::storage {
namespace {

// An index file opened for writing: its length as written, journaled at each sync.
class JournaledFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  JournaledFile(std::unique_ptr<rocksdb::FSWritableFile> file, std::string path, WriteJournal* journal, uint64_t size)
      : FSWritableFileOwnerWrapper(std::move(file)), path_(std::move(path)), journal_(journal), size_(size) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->Append(data, o, d);
    if (s.ok()) size_ += data.size();
    return s;
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& v, rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->Append(data, o, v, d);
    if (s.ok()) size_ += data.size();
    return s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset, const rocksdb::IOOptions& o,
                                     rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->PositionedAppend(data, offset, o, d);
    if (s.ok()) size_ = std::max<uint64_t>(size_, offset + data.size());
    return s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset, const rocksdb::IOOptions& o,
                                     const rocksdb::DataVerificationInfo& v, rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->PositionedAppend(data, offset, o, v, d);
    if (s.ok()) size_ = std::max<uint64_t>(size_, offset + data.size());
    return s;
  }
  rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->Truncate(size, o, d);
    if (s.ok()) size_ = size;
    return s;
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    if (journal_->index_syncs_fail()) return rocksdb::IOStatus::IOError("fsync failed (injected)");
    rocksdb::IOStatus s = target()->Sync(o, d);
    if (s.ok()) journal_->Synced(path_, size_);
    return s;
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    if (journal_->index_syncs_fail()) return rocksdb::IOStatus::IOError("fsync failed (injected)");
    rocksdb::IOStatus s = target()->Fsync(o, d);
    if (s.ok()) journal_->Synced(path_, size_);
    return s;
  }

 private:
  const std::string path_;
  WriteJournal* journal_;
  uint64_t size_;
};

class JournalingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  JournalingFileSystem(std::shared_ptr<rocksdb::FileSystem> target, WriteJournal* journal)
      : FileSystemWrapper(std::move(target)), journal_(journal) {}
  const char* Name() const override { return "StrataJournalingFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    std::unique_ptr<rocksdb::FSWritableFile> inner;
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, &inner, d);
    if (!s.ok()) return s;
    journal_->Created(f, 0);
    *r = std::make_unique<JournaledFile>(std::move(inner), f, journal_, 0);
    return s;
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override {
    uint64_t size = 0;
    if (!target()->GetFileSize(f, rocksdb::IOOptions(), &size, d).ok()) size = 0;
    std::unique_ptr<rocksdb::FSWritableFile> inner;
    rocksdb::IOStatus s = target()->ReopenWritableFile(f, o, &inner, d);
    if (!s.ok()) return s;
    journal_->Created(f, size);
    *r = std::make_unique<JournaledFile>(std::move(inner), f, journal_, size);
    return s;
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old, const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* d) override {
    std::unique_ptr<rocksdb::FSWritableFile> inner;
    rocksdb::IOStatus s = target()->ReuseWritableFile(f, old, o, &inner, d);
    if (!s.ok()) return s;
    journal_->Deleted(old);
    journal_->Created(f, 0);
    *r = std::make_unique<JournaledFile>(std::move(inner), f, journal_, 0);
    return s;
  }
  rocksdb::IOStatus RenameFile(const std::string& from, const std::string& to, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->RenameFile(from, to, o, d);
    if (s.ok()) journal_->Renamed(from, to);
    return s;
  }
  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->DeleteFile(f, o, d);
    if (s.ok()) journal_->Deleted(f);
    return s;
  }

 private:
  WriteJournal* journal_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WriteJournal>> WriteJournal::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create journal directory ", dir, ": ", ec.message()));
  const std::string path = dir + "/journal";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return absl::ErrnoToStatus(errno, "open " + path);
  return std::unique_ptr<WriteJournal>(new WriteJournal(dir, fd));
}

WriteJournal::~WriteJournal() { ::close(fd_); }

void WriteJournal::Append(const std::string& line) {
  // One write(2) per line: a kill leaves whole lines (and perhaps one cut last line).
  const std::string text = line + "\n";
  ssize_t ignored = ::write(fd_, text.data(), text.size());
  (void)ignored;
  ++next_;
}

void WriteJournal::BeforeBlockWrite(const std::string& file, uint64_t offset, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.insert({file, offset}).second) return;  // its pre-image is already saved
  std::vector<char> before(static_cast<size_t>(bytes), 0);
  const int in = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (in >= 0) {
    ssize_t n = ::pread(in, before.data(), before.size(), static_cast<off_t>(offset));
    (void)n;  // past the end: zeros
    ::close(in);
  }
  const std::string pre = absl::StrCat(dir_, "/pre-", next_);
  std::ofstream(pre, std::ios::binary).write(before.data(), static_cast<std::streamsize>(before.size()));
  Append(absl::StrCat("pre\t", next_, "\t", file, "\t", offset, "\t", bytes, "\t", pre));
}

uint64_t WriteJournal::Mark() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_;
}

void WriteJournal::SyncedData(const std::string& file, uint64_t mark) {
  std::lock_guard<std::mutex> lock(mu_);
  // Pre-images taken after the mark stay pending: their writes may postdate the sync.
  Append(absl::StrCat("datasync\t", file, "\t", mark));
  for (auto it = pending_.begin(); it != pending_.end();) it = it->first == file ? pending_.erase(it) : std::next(it);
}

void WriteJournal::Created(const std::string& path, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  Append(absl::StrCat("create\t", path, "\t", size));
}
void WriteJournal::Synced(const std::string& path, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  Append(absl::StrCat("sync\t", path, "\t", size));
}
void WriteJournal::Renamed(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  Append(absl::StrCat("rename\t", from, "\t", to));
}
void WriteJournal::Deleted(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  Append(absl::StrCat("delete\t", path));
}

std::shared_ptr<rocksdb::FileSystem> WriteJournal::IndexFileSystem() {
  return std::make_shared<JournalingFileSystem>(rocksdb::FileSystem::Default(), this);
}

absl::Status ApplyPowerCut(const std::string& dir) {
  std::ifstream in(dir + "/journal");
  if (!in) return absl::NotFoundError(absl::StrCat("no journal in ", dir));
  struct Pre {
    uint64_t line;
    int64_t bytes;
    std::string image;
  };
  struct IndexFile {
    uint64_t synced = 0;
    bool created_empty = false;
  };
  std::map<std::pair<std::string, uint64_t>, Pre> pre;  // the first pre-image since the file's sync
  std::map<std::string, IndexFile> files;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline: cut by the kill, never acted on
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f[0] == "pre" && f.size() == 6) {
      pre.emplace(std::make_pair(f[2], std::stoull(f[3])), Pre{std::stoull(f[1]), std::stoll(f[4]), f[5]});
    } else if (f[0] == "datasync" && f.size() == 3) {
      const uint64_t mark = std::stoull(f[2]);
      std::erase_if(pre, [&](const auto& e) { return e.first.first == f[1] && e.second.line < mark; });
    } else if (f[0] == "create" && f.size() == 3) {
      files[f[1]] = IndexFile{std::stoull(f[2]), std::stoull(f[2]) == 0};
    } else if (f[0] == "sync" && f.size() == 3) {
      files[f[1]].synced = std::stoull(f[2]);
      files[f[1]].created_empty = false;
    } else if (f[0] == "rename" && f.size() == 3) {
      if (auto it = files.find(f[1]); it != files.end()) {
        files[f[2]] = it->second;
        files.erase(f[1]);
      }
    } else if (f[0] == "delete" && f.size() == 2) {
      files.erase(f[1]);
    }
  }
  // SSD blocks written since their file's last completed sync: the writes are lost.
  for (const auto& [where, p] : pre) {
    std::ifstream image(p.image, std::ios::binary);
    std::vector<char> bytes(static_cast<size_t>(p.bytes), 0);
    image.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const int out = ::open(where.first.c_str(), O_WRONLY | O_CLOEXEC);
    if (out < 0) return absl::ErrnoToStatus(errno, "open " + where.first);
    const ssize_t n = ::pwrite(out, bytes.data(), bytes.size(), static_cast<off_t>(where.second));
    const int err = errno;
    ::close(out);
    if (n < 0) return absl::ErrnoToStatus(err, "pwrite " + where.first);
    if (n != static_cast<ssize_t>(bytes.size())) return absl::InternalError("pwrite " + where.first + ": short");
  }
  // Index files: cut to what was synced; never synced and new: gone.
  for (const auto& [path, f] : files) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    if (f.created_empty) {
      std::filesystem::remove(path, ec);
    } else if (std::filesystem::file_size(path, ec) > f.synced) {
      std::filesystem::resize_file(path, f.synced, ec);
    }
    if (ec) return absl::InternalError(absl::StrCat("cannot cut ", path, ": ", ec.message()));
  }
  // The journal is spent: the next run starts a new one.
  std::filesystem::remove_all(dir);
  return absl::OkStatus();
}

}  // namespace strata::storage
