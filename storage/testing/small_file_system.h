// SmallFileSystem: an ext4 file system of its own, loop-mounted for one test, to fill up
// (a full disk) without touching the machine's. Needs root, mkfs.ext4 and a loop device;
// Mount says why not where they are missing (the test then skips, saying so).
#ifndef STRATA_STORAGE_TESTING_SMALL_FILE_SYSTEM_H_
#define STRATA_STORAGE_TESTING_SMALL_FILE_SYSTEM_H_

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace strata::storage::testing {

class SmallFileSystem {
 public:
  SmallFileSystem() = default;
  SmallFileSystem(const SmallFileSystem&) = delete;
  SmallFileSystem& operator=(const SmallFileSystem&) = delete;
  ~SmallFileSystem() {
    if (mounted_) std::system(("umount -l " + mount_point_).c_str());
  }

  // Makes and mounts a file system of `megabytes` under `dir` (its image and mount point
  // go there). Empty when mounted; else why not.
  std::string Mount(const std::string& dir, int megabytes) {
    image_ = dir + "/fs.img";
    mount_point_ = dir + "/mnt";
    std::filesystem::create_directories(mount_point_);
    if (geteuid() != 0) return "mounting a file system needs root";
    const std::string make = "truncate -s " + std::to_string(megabytes) + "M " + image_ + " && mkfs.ext4 -q -F " +
                             image_ + " >/dev/null 2>&1";
    if (std::system(make.c_str()) != 0) return "cannot make an ext4 image (mkfs.ext4)";
    if (std::system(("mount -o loop " + image_ + " " + mount_point_ + " >/dev/null 2>&1").c_str()) != 0) {
      return "cannot loop-mount an image here (no loop device?)";
    }
    mounted_ = true;
    return "";
  }
  const std::string& path() const { return mount_point_; }

  // Takes all but `leave` bytes of the free space with one file (Unfill gives it back).
  // False when it could not.
  bool Fill(int64_t leave) {
    struct statvfs st;
    if (statvfs(mount_point_.c_str(), &st) != 0) return false;
    const int64_t avail = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
    if (avail <= leave) return true;
    const int fd = ::open(Filler().c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    const bool ok = ::fallocate(fd, 0, 0, avail - leave) == 0;
    ::close(fd);
    return ok;
  }
  void Unfill() {
    std::error_code ec;
    std::filesystem::remove(Filler(), ec);
  }

 private:
  std::string Filler() const { return mount_point_ + "/filler"; }

  std::string image_, mount_point_;
  bool mounted_ = false;
};

}  // namespace strata::storage::testing

#endif  // STRATA_STORAGE_TESTING_SMALL_FILE_SYSTEM_H_
