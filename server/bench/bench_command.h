// The `strata bench` command: a multi-turn serving benchmark that drives a strata server
// over gRPC (a running one, --target, or one it starts itself) with a synthetic
// ShareGPT-shaped workload, a trace replay, or a sweep of fixed shapes, optionally
// against a second server with the cache off, and reports latencies, throughput, cache
// reuse and errors (bench_command.cc lists the flags).
#ifndef STRATA_SERVER_BENCH_BENCH_COMMAND_H_
#define STRATA_SERVER_BENCH_BENCH_COMMAND_H_

namespace strata::server::bench {

// Runs the benchmark the (already parsed) command-line flags describe. Returns the exit
// code: 0 when every turn succeeded, 1 when a turn failed or a server could not be started
// or reached (the errors are reported by status code), 2 for bad flags (one line on stderr).
// Must be called from the main thread, once.
int RunBenchCommand();

}  // namespace strata::server::bench

#endif  // STRATA_SERVER_BENCH_BENCH_COMMAND_H_
