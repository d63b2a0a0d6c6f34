// Makes a directory entry (a file created, renamed or removed in it) durable: fsync of the
// directory holding `path`. Best effort: a directory that cannot be opened or synced is
// left as it is (false).
#ifndef STRATA_BASE_SYNC_DIRECTORY_H_
#define STRATA_BASE_SYNC_DIRECTORY_H_

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace strata {

inline bool SyncDirectoryOf(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  return synced;
}

}  // namespace strata

#endif  // STRATA_BASE_SYNC_DIRECTORY_H_
