// Flags that more than one `strata` command reads (defined once in shared_flags.cc; each
// command's own flags live in its <command>_command.cc).
#ifndef STRATA_SERVER_CLI_SHARED_FLAGS_H_
#define STRATA_SERVER_CLI_SHARED_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "engine/served_model.h"

ABSL_DECLARE_FLAG(int, port);
ABSL_DECLARE_FLAG(std::string, target);
ABSL_DECLARE_FLAG(std::string, api_key);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(double, kv_memory_fraction);

namespace strata::server::cli {

// --target, or 127.0.0.1:--port when it is empty.
std::string TargetFromFlags();
// --model, --device and --kv_memory_fraction as the options of engine::LoadServedModel.
engine::ServedModelOptions ServedModelFromFlags();

}  // namespace strata::server::cli

#endif  // STRATA_SERVER_CLI_SHARED_FLAGS_H_
