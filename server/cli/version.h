// strata's version, the git commit it was built from, and how it was built; for
// `strata --version` and the logs. Generated at every build (version.cmake).
#ifndef STRATA_SERVER_CLI_VERSION_H_
#define STRATA_SERVER_CLI_VERSION_H_

namespace strata::server::cli {

const char* Version();      // e.g. "0.4.0"
const char* GitCommit();    // short hash, "-dirty" when the tree had changes; "unknown" outside git
const char* BuildFlavor();  // e.g. "RelWithDebInfo, CUDA sm_90"

}  // namespace strata::server::cli

#endif  // STRATA_SERVER_CLI_VERSION_H_
