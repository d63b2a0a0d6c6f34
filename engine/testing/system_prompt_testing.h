// The shared-system-prompt engine tests' helpers (system_prompts_test.cc and
// system_prompt_faults_test.cc): a system part and a turn on it, and a fixture making
// engines on the CPU model with a small shared-prompt threshold.
#ifndef STRATA_ENGINE_TESTING_SYSTEM_PROMPT_TESTING_H_
#define STRATA_ENGINE_TESTING_SYSTEM_PROMPT_TESTING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "engine/engine.h"
#include "engine/testing/engine_testing.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_model.h"
#include "storage/session_store.h"
#include "text/tokenizer.h"

namespace strata::engine::testing {

// A system part of `n` tokens (printable bytes of the built-in tokenizer) for prompt `k`.
inline std::vector<int32_t> SystemPart(int n, int k) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 32 + (i * (7 + k) + 3 * k) % 90;
  return t;
}

inline TurnRequest Turn(const std::string& session, const std::vector<int32_t>& system, int own, int salt, int max_new) {
  TurnRequest r;
  r.key = {"t", session};
  r.prompt = system;
  for (int i = 0; i < own; ++i) r.prompt.push_back(32 + (i * 13 + salt * 5) % 90);
  r.system_tokens = static_cast<int64_t>(system.size());
  r.max_new_tokens = max_new;
  return r;
}

class SystemPromptEngineTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> MakeEngine(storage::SessionStore* store, metrics::Registry* registry = nullptr,
                                     int max_running = 64, int64_t hbm_bytes = -1) {
    return Make(CpuModel(), store, registry, max_running, hbm_bytes);
  }
  // An engine on the CPU model inside `Wrapper` (a test backend), which `*wrapper` points at.
  template <typename Wrapper>
  std::unique_ptr<Engine> MakeWrappedEngine(storage::SessionStore* store, Wrapper** wrapper, int max_running = 64) {
    auto backend = std::make_unique<Wrapper>(CpuModel(), "test-cpu");
    *wrapper = backend.get();
    return Make(std::move(backend), store, nullptr, max_running);
  }
  std::unique_ptr<model::CpuModel> CpuModel() const {
    return std::make_unique<model::CpuModel>(model::ModelWeights::Random(SmallConfig(), 99, tokenizer_.SilentTokens()));
  }
  std::unique_ptr<Engine> Make(std::unique_ptr<model::ModelBackend> model, storage::SessionStore* store,
                               metrics::Registry* registry, int max_running, int64_t hbm_bytes = -1) {
    EngineOptions options;
    options.hbm.capacity_bytes = hbm_bytes;
    options.min_shared_prompt_tokens = 64;
    options.warmup_tokens = 0;
    options.max_running = max_running;
    auto e = Engine::Create(options, std::move(model), &tokenizer_, store, registry);
    EXPECT_TRUE(e.ok()) << e.status();
    return *std::move(e);
  }
  uint64_t Fingerprint() const { return model::ModelWeights::Random(SmallConfig(), 99, {}).fingerprint(); }

  text::ByteTokenizer tokenizer_;
};

// A store with a host tier and an SSD tier under `dir` (its "ssd" and "index" folders) for
// the test model's chunks.
inline std::unique_ptr<storage::SessionStore> SsdStore(const std::string& dir, uint64_t fingerprint) {
  storage::SessionStoreOptions so;
  so.layout = Engine::ChunkLayoutFor(SmallConfig(), 16);
  so.host_capacity_bytes = int64_t{16} << 20;
  so.model_fingerprint = fingerprint;
  so.ssd_dirs = {dir + "/ssd"};
  so.ssd_capacity_bytes_per_dir = int64_t{32} << 20;
  so.index_dir = dir + "/index";
  so.ssd_read_bytes_per_second = 1e9;
  return *storage::SessionStore::Create(so);
}

}  // namespace strata::engine::testing

#endif  // STRATA_ENGINE_TESTING_SYSTEM_PROMPT_TESTING_H_
