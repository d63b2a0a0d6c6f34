// Small files that must survive a power cut: written (or appended to) and fsynced, with
// the directory entry of a new file synced too.
#ifndef STRATA_BASE_DURABLE_FILE_H_
#define STRATA_BASE_DURABLE_FILE_H_

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata {

// Makes a directory entry (a file created, renamed or removed in it) durable: fsync of the
// directory holding `path`. Best effort: false where it could not.
inline bool SyncDirectoryOf(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  return synced;
}

// Writes `bytes` to `path` (appended, or replacing what it held) in one write(2), and
// fsyncs it (and its directory where the file is new). An error says what failed.
inline absl::Status WriteFileDurably(const std::string& path, std::string_view bytes, bool append) {
  std::error_code ec;
  const bool created = !std::filesystem::exists(path, ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  const ssize_t wrote = ::write(fd, bytes.data(), bytes.size());
  const int err = wrote < 0 ? errno : 0;
  const bool synced = wrote == static_cast<ssize_t>(bytes.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) {
    return absl::InternalError(
        absl::StrCat("cannot write ", path, ": ", err != 0 ? std::strerror(err) : "short write or fsync failed"));
  }
  if (created) SyncDirectoryOf(path);
  return absl::OkStatus();
}

}  // namespace strata

#endif  // STRATA_BASE_DURABLE_FILE_H_
