// Relay attention (kernels/attention/relay.h) vs plain paged decode attention on the same
// inputs, and vs the device's copy bandwidth, measured in the same run: Llama-3-8B
// attention shapes (32 query heads, 8 KV heads of 128, bf16 KV, 16-token pages), `batch`
// sequences decoding on one shared system prompt of S tokens, each with `ctx` tokens of
// its own, over batch 1/8/32/64 x S 1K/4K/8K x ctx 128/1K. Plain reads the prompt's pages
// once per sequence (shared pages: L2 may serve some of the repeats; and a copy per
// sequence, as without page sharing); relay reads them once per step for the group.
// Printed beside: the paper's bound on relay's speedup, p = (s+c+2)/(s/b+c+7), the bytes
// relay must read (prompt once + every context) over its time as GB/s and as a share of
// the device-to-device copy rate (bytes read + written per second) of 1 GiB and of a copy
// of relay's bytes (what the memory system gives at that size, launch included), whether
// the backend's rule (cuda_model.h, relay_min_saved_tokens) would take the relay path,
// relay in its three-launch form (decode, system part, merge: the form before the fused
// launch, and what runs where the context part takes the tensor cores), relay's launches
// captured in a CUDA graph and replayed (as the decode graphs run it), and the two forms
// the launch chooses between given a side stream (the "relay" column: the model's choice):
// the fused launch on one stream, and the three launches with the system part on the side
// stream beside the decode; then the three launches with the system part on Hopper's
// warp-specialised wgmma form, beside the decode and after it, and chained before it on one
// stream (the decode its programmatic dependent; eager and as a graph), the best of all these forms
// (bytes read over its time, and as a share of the copy rate), a read of relay's rows (the
// prompt's pages once, then every context, as the decode kernels read pages, computing
// nothing: cuda_bench.h's PagedReadAsync) and its time over the best form's, and the system part alone in
// each form as TFLOP/s; after the table, the wgmma system part's time split into a fixed cost a
// block and a cost a key tile, from prompts S and 2S split alike (the same blocks, twice the
// tiles each). L2 is flushed before each timed run. K and V are random bf16 (a
// 64 MiB random block repeated through the pool).
//
//   build/tests/bench/relay_attention_bench           (needs a CUDA device; says so otherwise)
//   build/tests/bench/relay_attention_bench --sweep   and after the table, the fused launch's
//                                                     balance (blocks per SM of each part) at batch >= 32
//   build/tests/bench/relay_attention_bench --shape=B,S,C   that one row alone (e.g. under a profiler)
//   build/tests/bench/relay_attention_bench --share   and after the table, the chained form at batch
//                                                     >= 32 with the system part's split aimed at a
//                                                     share of the SMs (RelayTuning::system_sms), the
//                                                     decode on CUDA or tensor cores
//   build/tests/bench/relay_attention_bench --merge_part_by_part   the merges load their parts
//                                                     a group of 4 at a time, as before the
//                                                     loads at once (merge_launch.h)
//   build/tests/bench/relay_attention_bench --reads   and after the table, at batch >= 32, a read
//                                                     of relay's rows in three orders: the decode's
//                                                     through shared memory (the column above), the
//                                                     same into registers, and whole tokens
//                                                     (cuda_bench_paged_read.cu)
//   build/tests/bench/relay_attention_bench --timeline   and after the table, the wgmma system
//                                                     part's blocks phase by phase, three runs a
//                                                     row (a build with -DSTRATA_KERNEL_TIMELINE=ON:
//                                                     kernels/attention/block_timeline.h)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention/decode.h"
#include "kernels/attention/merge_launch.h"
#include "kernels/attention/prefill.h"
#include "kernels/attention/prefill_launch.h"
#include "kernels/attention/relay.h"
#include "kernels/testing/paged_pool.h"
#include "model/cuda/cuda_model.h"
#include "tests/bench/cuda_bench.h"
#include "tests/bench/wgmma_timeline.h"

namespace {

using strata::bench::MedianMs;
using strata::bench::Upload;

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
}

// The relative L2 difference of `got` from `want`.
double RelL2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return std::sqrt(diff / norm);
}

float* Floats(int64_t n) {
  float* p = nullptr;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&p), static_cast<size_t>(std::max<int64_t>(1, n)) * sizeof(float)));
  return p;
}

// The pages of the sequences, shuffled through the pool (K and V left empty), and the
// pool's size in pages.
strata::kernels::test_support::PagedPool PoolPages(const std::vector<int64_t>& lengths, int page_size,
                                                   int32_t* total_pages) {
  std::mt19937 gen(1);
  return strata::kernels::test_support::ShuffledPages(lengths, page_size, gen, total_pages);
}

// A device buffer of `elements` bf16 values in [-2, 2): a 64 MiB random block (splitmix64,
// drawn once a seed) repeated. Timing needs random values, not distinct ones, and drawing
// the largest row's 2.4 GB on the host would take most of a minute.
uint16_t* RandomDeviceBf16(size_t elements, uint64_t seed) {
  constexpr size_t kBlock = size_t{32} << 20;
  static std::vector<std::vector<uint16_t>> blocks;
  static std::vector<uint16_t*> device_blocks;
  while (blocks.size() <= seed) {
    std::vector<uint16_t> block(kBlock);
    uint64_t state = 0x5eed0000ull + blocks.size();
    for (size_t i = 0; i < kBlock; i += 4) {
      uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      for (size_t j = 0; j < 4; ++j) {
        const float f = static_cast<float>((z >> (16 * j)) & 0xffff) * (4.0f / 65536.0f) - 2.0f;
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        block[i + j] = static_cast<uint16_t>(bits >> 16);
      }
    }
    device_blocks.push_back(Upload(block));
    blocks.push_back(std::move(block));
  }
  uint16_t* p = nullptr;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, elements) * sizeof(uint16_t)));
  for (size_t at = 0; at < elements; at += kBlock) {
    CHECK_CUDA(cudaMemcpy(p + at, device_blocks[seed], std::min(kBlock, elements - at) * sizeof(uint16_t),
                          cudaMemcpyDeviceToDevice));
  }
  return p;
}

// Median milliseconds of `reps` replays of a graph holding what fn enqueues on `stream`.
template <typename Fn, typename Flush>
float GraphMedianMs(cudaStream_t stream, int reps, Fn fn, Flush flush) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  fn();
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const float ms = MedianMs(stream, reps, [&] { CHECK_CUDA(cudaGraphLaunch(exec, stream)); }, flush);
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  bool sweep = false, share = false, reads = false, timeline = false;
  long long only_batch = 0, only_prompt = 0, only_ctx = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
    } else if (std::strcmp(argv[i], "--share") == 0) {
      share = true;
    } else if (std::strcmp(argv[i], "--reads") == 0) {
      reads = true;
    } else if (std::strcmp(argv[i], "--timeline") == 0) {
      timeline = true;
    } else if (std::strcmp(argv[i], "--merge_part_by_part") == 0) {
      strata::kernels::internal::SetMergeLoadsAtOnceForBenchmarks(false);
    } else if (std::sscanf(argv[i], "--shape=%lld,%lld,%lld", &only_batch, &only_prompt, &only_ctx) != 3) {
      std::fprintf(stderr, "usage: relay_attention_bench [--sweep] [--share] [--reads] [--timeline] "
                   "[--shape=batch,S,ctx] [--merge_part_by_part]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: relay_attention_bench needs a GPU (skipped)\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream, side;
  CHECK_CUDA(cudaStreamCreate(&stream));
  // The side stream relay's system part may take (as the model gives it: RelaySide).
  CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CHECK_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  strata::bench::CopyCeiling ceiling(stream);
  auto flush = [&] { ceiling.Flush(); };
  const double copy_gbps = ceiling.Gbps();  // read + write
  std::printf("%s, %d SMs; device-to-device copy of 1 GiB: %.0f GB/s (read + write)\n\n", prop.name,
              prop.multiProcessorCount, copy_gbps);
  // The fused launch's balances the sweep compares: blocks per SM of the system part, of the
  // context part.
  const std::vector<std::pair<int, int>> balances = {{1, 2}, {2, 2}, {1, 4}, {2, 4}, {3, 4}, {2, 6}, {2, 8}, {4, 4}};
  std::string sweep_table = "| batch | S | ctx | three launches (ms) |";
  for (auto [sys, ctx] : balances) {
    sweep_table += " fused " + std::to_string(sys) + "/" + std::to_string(ctx) + " (ms) |";
  }
  sweep_table += " fused 2/2, context first (ms) | fused vs three launches, rel. L2 diff |\n|---|---|---|---|---|---|";
  for (size_t i = 0; i < balances.size(); ++i) sweep_table += "---|";
  sweep_table += "\n";
  // The chained form's shares of the SMs for the system part (all, 3/4, 1/2, 1/3, 1/4).
  const int sms = prop.multiProcessorCount;
  const std::vector<int> shares = {0, sms * 3 / 4, sms / 2, sms / 3, sms / 4};
  std::string share_table = "| batch | S | ctx | decode on |";
  for (int n : shares) share_table += n == 0 ? " all SMs (ms) |" : " " + std::to_string(n) + " SMs (ms) |";
  share_table += " best: GB/s read, vs copy | largest rel. L2 diff vs three launches |\n|---|---|---|---|";
  for (size_t i = 0; i < shares.size(); ++i) share_table += "---|";
  share_table += "---|---|\n";
  std::string timeline_table;  // --timeline: the rows of WgmmaTimelineRows
  std::string read_table =
      "| batch | S | ctx | MB | cp.async, a warp a head (ms) | registers, a warp a head (ms) | registers, whole "
      "tokens (ms) | best read: GB/s, vs copy |\n|---|---|---|---|---|---|---|---|\n";
  std::printf(
      "| batch | S | ctx | plain, shared pages (ms) | plain, a copy each (ms) | relay (ms) | relay vs shared pages | "
      "relay vs a copy each | paper's bound | relay GB/s read | vs copy | same-size copy GB/s | "
      "vs same-size copy | rule takes relay | three launches (ms) | relay, graph (ms) | fused, one stream (ms) | "
      "three, system part beside (ms) | beside, system part on wgmma (ms) | three, system part on wgmma (ms) | "
      "chained, wgmma (ms) | chained, wgmma, graph (ms) | chained, parts of 1K+ keys (ms) | "
      "chained, parts of 1K+ keys, graph (ms) | "
      "best form: GB/s read, vs copy | paged read of relay's rows (ms), vs best form | "
      "system part alone: mma.sync / wgmma (TFLOP/s) |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const int kv_heads = 8, heads = 32, head_dim = 128, page = 16;
  const float scale = 0.088f;
  const double token_bytes = 2.0 * kv_heads * head_dim * 2;  // K and V, bf16
  const strata::model::CudaModelOptions defaults;
  // The wgmma system part alone by (batch, prompt): its time (ms) and its split along the
  // prompt, at 128-token contexts (the part does not read them), for the fit after the table.
  std::map<std::pair<int, int64_t>, std::pair<double, int>> system_alone;
  for (int64_t prompt : {1024, 4096, 8192}) {
    for (int64_t ctx : {128, 1024}) {
      for (int batch : {1, 8, 32, 64}) {
        if (only_batch > 0 && (batch != only_batch || prompt != only_prompt || ctx != only_ctx)) continue;
        // Sequences 0..batch-1: a copy of the prompt each (for the unshared plain run);
        // sequence batch: the shared prompt; then each sequence's own context.
        std::vector<int64_t> lengths(static_cast<size_t>(batch), prompt);
        lengths.push_back(prompt);
        for (int b = 0; b < batch; ++b) lengths.push_back(ctx);
        int32_t pool_pages = 0;
        const auto pool = PoolPages(lengths, page, &pool_pages);
        auto pages_of = [&](int s) {
          return std::vector<int32_t>(pool.indices.begin() + pool.indptr[s], pool.indices.begin() + pool.indptr[s + 1]);
        };
        std::vector<int32_t> shared_indptr{0}, shared_indices, copy_indptr{0}, copy_indices, ctx_indptr{0}, ctx_indices,
            last, prefix_indptr{0, static_cast<int32_t>(prompt / page)}, prefix_last{page}, group_rows{0, batch};
        const std::vector<int32_t> prefix_pages = pages_of(batch);
        for (int b = 0; b < batch; ++b) {
          const std::vector<int32_t> own = pages_of(batch + 1 + b), copy = pages_of(b);
          shared_indices.insert(shared_indices.end(), prefix_pages.begin(), prefix_pages.end());
          shared_indices.insert(shared_indices.end(), own.begin(), own.end());
          shared_indptr.push_back(static_cast<int32_t>(shared_indices.size()));
          copy_indices.insert(copy_indices.end(), copy.begin(), copy.end());
          copy_indices.insert(copy_indices.end(), own.begin(), own.end());
          copy_indptr.push_back(static_cast<int32_t>(copy_indices.size()));
          ctx_indices.insert(ctx_indices.end(), own.begin(), own.end());
          ctx_indptr.push_back(static_cast<int32_t>(ctx_indices.size()));
          last.push_back(pool.last_page_len[static_cast<size_t>(batch + 1 + b)]);
        }
        const size_t pool_elements = static_cast<size_t>(pool_pages) * page * kv_heads * head_dim;
        uint16_t* k = RandomDeviceBf16(pool_elements, 0);
        uint16_t* v = RandomDeviceBf16(pool_elements, 1);
        int32_t *d_shared_indptr = Upload(shared_indptr), *d_shared_indices = Upload(shared_indices),
                *d_copy_indptr = Upload(copy_indptr), *d_copy_indices = Upload(copy_indices),
                *d_ctx_indptr = Upload(ctx_indptr), *d_ctx_indices = Upload(ctx_indices), *d_last = Upload(last),
                *d_prefix_indptr = Upload(prefix_indptr), *d_prefix_indices = Upload(prefix_pages),
                *d_prefix_last = Upload(prefix_last), *d_group_rows = Upload(group_rows);
        std::vector<float> qh(static_cast<size_t>(batch) * heads * head_dim);
        for (size_t i = 0; i < qh.size(); ++i) qh[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
        float* q = Upload(qh);
        float* out = Floats(static_cast<int64_t>(qh.size()));
        const int64_t total = prompt + ctx;
        const strata::kernels::RelayShape shape{batch, 1, batch, batch, heads, kv_heads, head_dim, ctx, prompt};
        int64_t ws_floats = std::max(strata::kernels::DecodeWorkspaceFloats(batch, heads, head_dim, total),
                                     strata::kernels::RelayDecodeWorkspaceFloats(shape));
        for (auto [sys, ctx_blocks] : balances) {
          ws_floats = std::max(ws_floats,
                               strata::kernels::internal::RelayDecodeWorkspaceFloats(shape, {sys, ctx_blocks, false}));
        }
        using Kernel = strata::kernels::DecodeKernel;
        // The decode on either kernel.
        struct ShareDecode {
          Kernel kernel;
          const char* name;
        };
        const ShareDecode share_decodes[] = {{Kernel::kCudaCores, "CUDA cores"}, {Kernel::kTensorCores, "tensor cores"}};
        auto share_tuning = [&](int n, const ShareDecode& d) {
          strata::kernels::internal::RelayTuning t;
          t.three_launches = t.chained = true;
          t.system_form = strata::kernels::internal::RelaySystemForm::kWgmmaWs;
          t.system_sms = n;
          t.context_kernel = d.kernel;
          return t;
        };
        for (int n : shares) {
          for (const ShareDecode& d : share_decodes) {
            ws_floats =
                std::max(ws_floats, strata::kernels::internal::RelayDecodeWorkspaceFloats(shape, share_tuning(n, d)));
          }
        }
        float* ws = Floats(ws_floats);
        auto plain = [&](const int32_t* indptr, const int32_t* indices) {
          const strata::kernels::PagedKv kv{k, v, page, kv_heads, head_dim, indptr, indices, d_last};
          return MedianMs(
              stream, 20,
              [&] {
                Check(strata::kernels::LaunchPagedDecodeAttention({q, kv, batch, heads, scale, total, ws, out, nullptr},
                                                                  stream));
              },
              flush);
        };
        // Relay's rows as one paged read: the prompt's pages once, then every context.
        std::vector<int32_t> read_indptr{0, static_cast<int32_t>(prefix_pages.size())}, read_indices = prefix_pages,
                                                                                          read_last{page};
        for (int b = 0; b < batch; ++b) {
          read_indices.insert(read_indices.end(), ctx_indices.begin() + ctx_indptr[b],
                              ctx_indices.begin() + ctx_indptr[b + 1]);
          read_indptr.push_back(static_cast<int32_t>(read_indices.size()));
          read_last.push_back(last[static_cast<size_t>(b)]);
        }
        int32_t *d_read_indptr = Upload(read_indptr), *d_read_indices = Upload(read_indices),
                *d_read_last = Upload(read_last);
        const strata::kernels::PagedKv read_rows{k, v, page, kv_heads, head_dim, d_read_indptr, d_read_indices, d_read_last};
        float* sink = Floats(1);
        const float read_ms = MedianMs(
            stream, 20,
            [&] { CHECK_CUDA(strata::bench::PagedReadAsync(read_rows, batch + 1, std::max(prompt, ctx), sink, stream)); },
            flush);
        const strata::kernels::PagedKv context{k, v, page, kv_heads, head_dim, d_ctx_indptr, d_ctx_indices, d_last};
        const strata::kernels::PagedKv prefixes{
            k, v, page, kv_heads, head_dim, d_prefix_indptr, d_prefix_indices, d_prefix_last};
        const strata::kernels::RelayDecodeParams params{
            q,   context, prefixes, d_group_rows, batch, 1, batch, batch, heads, scale, ctx, prompt, ws,
            out, {side, fork, join}};
        strata::kernels::RelayDecodeParams one_stream = params;
        one_stream.side = {};
        auto relay = [&](const strata::kernels::internal::RelayTuning& t) {
          Check(strata::kernels::internal::LaunchRelayDecodeAttention(params, t, stream));
        };
        const float three_ms = MedianMs(stream, 20, [&] { relay({2, 2, true}); }, flush);
        if (sweep && batch >= 32) {
          char cell[64];
          std::snprintf(cell, sizeof(cell), "| %d | %lld | %lld | %.3f |", batch, static_cast<long long>(prompt),
                        static_cast<long long>(ctx), three_ms);
          sweep_table += cell;
          for (auto [sys, ctx_blocks] : balances) {
            std::snprintf(cell, sizeof(cell), " %.3f |",
                          MedianMs(stream, 20, [&] { relay({sys, ctx_blocks, false}); }, flush));
            sweep_table += cell;
          }
          std::snprintf(cell, sizeof(cell), " %.3f |",
                        MedianMs(stream, 20, [&] { relay({2, 2, false, true}); }, flush));
          sweep_table += cell;
          // The two forms' outputs on these inputs (a check at these shapes; relay_test is the test).
          std::vector<float> fused_out(qh.size()), three_out(qh.size());
          relay({2, 2, true});
          CHECK_CUDA(cudaMemcpy(three_out.data(), out, qh.size() * sizeof(float), cudaMemcpyDeviceToHost));
          relay({2, 2, false});
          CHECK_CUDA(cudaMemcpy(fused_out.data(), out, qh.size() * sizeof(float), cudaMemcpyDeviceToHost));
          std::snprintf(cell, sizeof(cell), " %.2e |\n", RelL2(fused_out, three_out));
          sweep_table += cell;
        }
        if (reads && batch >= 32) {
          // What a read of the same rows gives, by order: the decode's (a warp a head) through
          // shared memory and into registers, and whole tokens (a block a sequence).
          auto form_ms = [&](bool whole) {
            return MedianMs(
                stream, 20,
                [&] {
                  CHECK_CUDA(strata::bench::PagedReadFormAsync(read_rows, batch + 1, std::max(prompt, ctx), whole,
                                                               sink, stream));
                },
                flush);
          };
          const double per_head_ms = form_ms(false), whole_ms = form_ms(true);
          const double read_bytes = token_bytes * (prompt + batch * ctx);
          const double best_read = std::min({static_cast<double>(read_ms), per_head_ms, whole_ms});
          char line[256];
          std::snprintf(line, sizeof(line), "| %d | %lld | %lld | %.0f | %.3f | %.3f | %.3f | %.0f, %.2f |\n", batch,
                        static_cast<long long>(prompt), static_cast<long long>(ctx), read_bytes / 1e6, read_ms,
                        per_head_ms, whole_ms, read_bytes / (best_read * 1e-3) / 1e9,
                        read_bytes / (best_read * 1e-3) / 1e9 / copy_gbps);
          read_table += line;
        }
        if (share && batch >= 32) {
          std::vector<float> three_out(qh.size()), got(qh.size());
          relay({2, 2, true});
          CHECK_CUDA(cudaMemcpy(three_out.data(), out, qh.size() * sizeof(float), cudaMemcpyDeviceToHost));
          double worst = 0, best_ms = 1e30;
          std::string rows;
          for (const ShareDecode& d : share_decodes) {
            char cell[128];
            std::snprintf(cell, sizeof(cell), "| %d | %lld | %lld | %s |", batch, static_cast<long long>(prompt),
                          static_cast<long long>(ctx), d.name);
            rows += cell;
            for (int n : shares) {
              const strata::kernels::internal::RelayTuning t = share_tuning(n, d);
              const float ms = MedianMs(stream, 20, [&] { relay(t); }, flush);
              best_ms = std::min<double>(best_ms, ms);
              std::snprintf(cell, sizeof(cell), " %.3f |", ms);
              rows += cell;
              relay(t);
              CHECK_CUDA(cudaMemcpy(got.data(), out, qh.size() * sizeof(float), cudaMemcpyDeviceToHost));
              worst = std::max(worst, RelL2(got, three_out));
            }
            rows += &d != &share_decodes[1] ? " | |\n" : "";
          }
          const double gbps = token_bytes * (prompt + batch * ctx) / (best_ms * 1e-3) / 1e9;
          char tail[96];
          std::snprintf(tail, sizeof(tail), " %.0f, %.2f | %.2e |\n", gbps, gbps / copy_gbps, worst);
          share_table += rows + tail;
        }
        const float shared_ms = plain(d_shared_indptr, d_shared_indices);
        const float copy_each_ms = plain(d_copy_indptr, d_copy_indices);
        const float relay_ms = MedianMs(
            stream, 20, [&] { Check(strata::kernels::LaunchRelayDecodeAttention(params, stream)); }, flush);
        const float graph_ms = GraphMedianMs(
            stream, 20, [&] { Check(strata::kernels::LaunchRelayDecodeAttention(params, stream)); }, flush);
        const float fused_ms = MedianMs(
            stream, 20, [&] { Check(strata::kernels::LaunchRelayDecodeAttention(one_stream, stream)); }, flush);
        strata::kernels::internal::RelayTuning beside;
        beside.three_launches = beside.beside = true;
        const float beside_ms = MedianMs(stream, 20, [&] { relay(beside); }, flush);
        using Form = strata::kernels::internal::RelaySystemForm;
        // The system part on Hopper's warp-specialised form: beside the decode, and after it.
        strata::kernels::internal::RelayTuning beside_ws = beside, three_ws;
        beside_ws.system_form = three_ws.system_form = Form::kWgmmaWs;
        three_ws.three_launches = true;
        const float beside_ws_ms = MedianMs(stream, 20, [&] { relay(beside_ws); }, flush);
        const float three_ws_ms = MedianMs(stream, 20, [&] { relay(three_ws); }, flush);
        // Chained on one stream: the wgmma system part, then the decode as its programmatic
        // dependent (Hopper), eagerly and as a graph.
        strata::kernels::internal::RelayTuning chained_ws = three_ws;
        chained_ws.chained = true;
        const float chained_ms = MedianMs(stream, 20, [&] { relay(chained_ws); }, flush);
        const float chained_graph_ms = GraphMedianMs(stream, 20, [&] { relay(chained_ws); }, flush);
        // The same with no part of the prompt shorter than the default chained form's.
        strata::kernels::internal::RelayTuning chained_long = chained_ws;
        chained_long.system_min_part_keys = strata::kernels::internal::kRelayChainedMinPartKeys;
        const float chained_long_ms = MedianMs(stream, 20, [&] { relay(chained_long); }, flush);
        const float chained_long_graph_ms = GraphMedianMs(stream, 20, [&] { relay(chained_long); }, flush);
        // The system part alone (the group's rows against the prompt, split along it as the
        // launch splits it for the form), in each form: its arithmetic rate.
        strata::kernels::PrefillAttentionTcParams sys_params{q,     prefixes, d_group_rows, 1,       batch, heads,
                                                             scale, batch,    nullptr,      nullptr};
        sys_params.all_keys = true;
        strata::kernels::internal::PrefillTcParams sys = strata::kernels::internal::ToTcParams(sys_params);
        int most_splits = 1;
        for (Form form : {Form::kMmaSync, Form::kWgmmaWs}) {
          most_splits = std::max(most_splits, strata::kernels::internal::RelaySystemSplits(shape, form));
        }
        sys.ws_o = Floats(int64_t{batch} * most_splits * heads * head_dim);
        sys.ws_lse = Floats(int64_t{batch} * most_splits * heads);
        const double sys_flop = 4.0 * batch * heads * prompt * head_dim;
        auto sys_ms = [&](Form form) {
          namespace in = strata::kernels::internal;
          sys.key_splits = in::RelaySystemSplits(shape, form);
          return MedianMs(
              stream, 20,
              [&] {
                CHECK_CUDA(form == Form::kMmaSync
                               ? in::PagedPrefillAttentionTcAsync(sys, in::PrefillTcTiles::k64Rows4Warps, stream)
                               : in::PagedPrefillAttentionWgmmaWsAsync(sys, stream));
              },
              flush);
        };
        auto tflops = [&](double ms) { return sys_flop / (ms * 1e-3) / 1e12; };
        const bool wgmma = strata::kernels::internal::PrefillWgmmaSupported(head_dim);
        const double mma_tflops = tflops(sys_ms(Form::kMmaSync));
        double ws_tflops = 0.0;
        if (wgmma) {
          const double ms = sys_ms(Form::kWgmmaWs);
          ws_tflops = tflops(ms);
          if (ctx == 128) system_alone[{batch, prompt}] = {ms, sys.key_splits};
          if (timeline) {
            timeline_table += strata::bench::WgmmaTimelineRows(
                std::to_string(batch) + " x " + std::to_string(prompt) + " x " + std::to_string(ctx) + ", " +
                    std::to_string(sys.key_splits) + " parts",
                stream, head_dim, 3, static_cast<float>(ms),
                [&] { CHECK_CUDA(strata::kernels::internal::PagedPrefillAttentionWgmmaWsAsync(sys, stream)); }, flush);
          }
        }
        CHECK_CUDA(cudaFree(sys.ws_o));
        CHECK_CUDA(cudaFree(sys.ws_lse));
        const double relay_bytes = token_bytes * (prompt + batch * ctx);
        const double same_size_gbps = ceiling.Gbps(static_cast<size_t>(relay_bytes));
        const double s = static_cast<double>(prompt), c = static_cast<double>(ctx);
        const double bound = (s + c + 2) / (s / batch + c + 7);
        const double read_gbps = relay_bytes / (relay_ms * 1e-3) / 1e9;
        const double best_ms = std::min(
            {relay_ms, graph_ms, three_ms, fused_ms, beside_ms, beside_ws_ms, three_ws_ms, chained_ms, chained_graph_ms,
             chained_long_ms, chained_long_graph_ms});
        const double best_gbps = relay_bytes / (best_ms * 1e-3) / 1e9;
        const bool rule = batch >= 2 && (batch - 1) * prompt >= defaults.relay_min_saved_tokens;
        std::printf(
            "| %d | %lld | %lld | %.3f | %.3f | %.3f | %.2fx | %.2fx | %.2fx | %.0f | %.2f | %.0f | %.2f | %s | %.3f | "
            "%.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.0f, %.2f | %.3f, %.2f | %.0f / %.0f |\n",
            batch, static_cast<long long>(prompt), static_cast<long long>(ctx), shared_ms, copy_each_ms, relay_ms,
            shared_ms / relay_ms, copy_each_ms / relay_ms, bound, read_gbps, read_gbps / copy_gbps, same_size_gbps,
            read_gbps / same_size_gbps, rule ? "yes" : "no", three_ms, graph_ms, fused_ms, beside_ms, beside_ws_ms,
            three_ws_ms, chained_ms, chained_graph_ms, chained_long_ms, chained_long_graph_ms, best_gbps,
            best_gbps / copy_gbps, read_ms, read_ms / best_ms, mma_tflops, ws_tflops);
        std::fflush(stdout);
        for (void* p :
             {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(d_shared_indptr),
              static_cast<void*>(d_shared_indices), static_cast<void*>(d_copy_indptr),
              static_cast<void*>(d_copy_indices), static_cast<void*>(d_ctx_indptr), static_cast<void*>(d_ctx_indices),
              static_cast<void*>(d_last), static_cast<void*>(d_prefix_indptr), static_cast<void*>(d_prefix_indices),
              static_cast<void*>(d_prefix_last), static_cast<void*>(d_group_rows), static_cast<void*>(q),
              static_cast<void*>(out), static_cast<void*>(ws), static_cast<void*>(d_read_indptr),
              static_cast<void*>(d_read_indices), static_cast<void*>(d_read_last), static_cast<void*>(sink)}) {
          CHECK_CUDA(cudaFree(p));
        }
      }
    }
  }
  // t = F + T x tiles a block: from S and 2S split alike, F = 2 t(S) - t(2S) and
  // T = (t(2S) - t(S)) / tiles(S), tiles of 64 keys (the wgmma form's).
  std::string fit;
  for (const auto& [at, alone] : system_alone) {
    const auto twice = system_alone.find({at.first, at.second * 2});
    if (twice == system_alone.end() || twice->second.second != alone.second) continue;
    const double tiles = static_cast<double>(at.second) / alone.second / 64;
    const double t1 = alone.first * 1e3, t2 = twice->second.first * 1e3;  // µs
    const double fixed = 2 * t1 - t2, per_tile = (t2 - t1) / tiles;
    char cell[192];
    std::snprintf(cell, sizeof(cell), "| %d | %lld / %lld | %d | %.0f | %.1f / %.1f | %.1f | %.2f | %.2f |\n", at.first,
                  static_cast<long long>(at.second), static_cast<long long>(2 * at.second), alone.second, tiles, t1,
                  t2, fixed, per_tile, fixed / t1);
    fit += cell;
  }
  if (!fit.empty()) {
    std::printf(
        "\nThe wgmma system part alone (eager, L2 flushed) at prompts S and 2S split alike: a block's fixed cost F "
        "(launch, lookups, first loads, Q's load, the output's store) and its cost T a 64-key tile:\n\n"
        "| batch | S / 2S | parts | tiles a block at S | t(S) / t(2S) (us) | F (us) | T (us) | F's share of t(S) |\n"
        "|---|---|---|---|---|---|---|---|\n%s",
        fit.c_str());
  }
  if (sweep) std::printf("\nThe fused launch's balance (system / context blocks per SM):\n\n%s", sweep_table.c_str());
  if (share) {
    std::printf("\nChained (wgmma system part, eager), its split aimed at a share of the SMs:\n\n%s",
                share_table.c_str());
  }
  if (reads) {
    std::printf("\nA read of relay's rows (the prompt once, every context), by order:\n\n%s", read_table.c_str());
  }
  if (timeline) {
    if (timeline_table.empty()) {
      std::printf("\n--timeline: this build stamps nothing (configure with -DSTRATA_KERNEL_TIMELINE=ON)\n");
    } else {
      std::printf(
          "\nThe wgmma system part's blocks (eager, L2 flushed), each phase's median over the blocks in us from the "
          "block's start:\n\n%s%s",
          strata::bench::WgmmaTimelineHeader().c_str(), timeline_table.c_str());
    }
  }
  return 0;
}
