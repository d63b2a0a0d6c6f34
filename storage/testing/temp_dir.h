// TempDir: a fresh directory for one test, removed with its contents at the end.
//
// Made under $TEST_TMPDIR when set, else under the working directory (ctest runs tests in
// the build tree): the SSD tier opens its files with O_DIRECT, which tmpfs (often /tmp)
// does not support.
#ifndef STRATA_STORAGE_TESTING_TEMP_DIR_H_
#define STRATA_STORAGE_TESTING_TEMP_DIR_H_

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace strata::storage::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "strata-test") {
    const char* env = std::getenv("TEST_TMPDIR");
    std::filesystem::path base = env != nullptr && *env != '\0' ? std::filesystem::path(env)
                                                                : std::filesystem::current_path();
    std::string tmpl = (base / (prefix + "-XXXXXX")).string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed in " + base.string());
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace strata::storage::testing

#endif  // STRATA_STORAGE_TESTING_TEMP_DIR_H_
