// A fixture for end-to-end suites that set a server with the session cache on beside one
// with it off: both started once per suite (`strata serve`, CPU, the built-in model), both
// stopped at its end and required to exit cleanly (under the sanitizers, a clean exit also
// means they found nothing in the server). CRTP, so that each suite has its own pair.
#ifndef STRATA_TESTS_E2E_CACHE_ON_OFF_SERVERS_H_
#define STRATA_TESTS_E2E_CACHE_ON_OFF_SERVERS_H_

#include <sys/wait.h>

#include "gtest/gtest.h"
#include "tests/e2e/server_process.h"

namespace strata::testing {

template <typename Suite>
class CacheOnOffServers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto on = ServerProcess::Start({});
    ASSERT_TRUE(on.ok()) << on.status();
    cache_on_ = on->release();
    auto off = ServerProcess::Start({"--cache=off"});
    ASSERT_TRUE(off.ok()) << off.status();
    cache_off_ = off->release();
  }
  static void TearDownTestSuite() {
    for (ServerProcess* server : {cache_on_, cache_off_}) {
      if (server == nullptr) continue;
      const int status = server->Stop();
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ADD_FAILURE() << "strata serve did not exit cleanly: wait status " << status;
      }
      delete server;
    }
    cache_on_ = cache_off_ = nullptr;
  }
  static inline ServerProcess* cache_on_ = nullptr;
  static inline ServerProcess* cache_off_ = nullptr;
};

}  // namespace strata::testing

#endif  // STRATA_TESTS_E2E_CACHE_ON_OFF_SERVERS_H_
