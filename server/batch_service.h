// BatchService: large offline batches. The prompts of a call are read to the end, built as
// chat turns are (server/prompt_builder.h), planned as a whole and run through the engine
// beside chat traffic (batch/batch_runner.h); results stream back as prompts finish.
#ifndef STRATA_SERVER_BATCH_SERVICE_H_
#define STRATA_SERVER_BATCH_SERVICE_H_

#include "proto/request_traits.h"  // before the generated service: strict request parsing

#include <cstdint>

#include "base/metrics.h"
#include "batch/batch_runner.h"
#include "engine/engine.h"
#include "server/auth.h"
#include "server/prompt_builder.h"
#include "strata/v1/batch.grpc.pb.h"

namespace strata::server {

struct BatchServiceOptions {
  int max_prompts = 100000;  // prompts one call may send (RESOURCE_EXHAUSTED past it)
  batch::RunnerOptions runner;
};

inline constexpr size_t kMaxBatchIdBytes = 256;
inline constexpr int64_t kDefaultBatchMaxNewTokens = 256;

class BatchServiceImpl final : public v1::BatchService::Service {
 public:
  // All must outlive the service.
  BatchServiceImpl(engine::Engine* engine, const PromptBuilder* prompts, const ApiKeys* api_keys,
                   metrics::Registry* registry, BatchServiceOptions options);

  grpc::Status BatchGenerate(grpc::ServerContext* context,
                             grpc::ServerReaderWriter<v1::BatchEvent, v1::BatchRequest>* stream) override;

 private:
  engine::Engine* engine_;
  const PromptBuilder* prompts_;
  const ApiKeys* api_keys_;
  const BatchServiceOptions options_;
  metrics::Counter* completed_;
  metrics::Counter* failed_;
  metrics::Counter* saved_tokens_;
};

}  // namespace strata::server

#endif  // STRATA_SERVER_BATCH_SERVICE_H_
