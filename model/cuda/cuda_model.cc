// The CudaModel methods: making the model (device checks, weights, pool), sequences,
// Forward (plan the step, pack its metadata, run it eagerly or as a graph, wait), and the
// KV copies to and from the session store's chunks. The forward pass itself is in
// layer_loop.cc; the pieces are in the other files of model/cuda/.
#include "model/cuda/cuda_model.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "kernels/attention/relay.h"
#include "kernels/cuda_check.h"
#include "kernels/dispatch.h"
#include "model/cuda/cuda_model_impl.h"
#include "model/cuda/kv_transfer.h"

namespace strata::model {

using cuda_internal::CudaSequence;
using cuda_internal::DrainOnError;
using cuda_internal::StepPlan;

absl::Status CudaModel::Impl::UseDevice() const {
  thread_local int current = -1;
  if (current != options.device) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
    current = options.device;
  }
  return absl::OkStatus();
}

absl::Status CudaModel::Impl::Init(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError("no CUDA GPU is visible (use --device=cpu)");
  }
  if (device >= count) {
    return absl::FailedPreconditionError(absl::StrCat("CUDA device ", device, " asked for; ", count, " visible"));
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaDeviceProp prop{};
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  if (prop.major < 8) {
    return absl::FailedPreconditionError(absl::StrCat("GPU ", prop.name, " (sm_", prop.major, prop.minor,
                                                      ") is older than strata's CUDA kernels need (sm_90)"));
  }
  // The steps' kernels (and the loads' placement, which steps wait for) come first; a
  // write-back's gathers take the SMs they leave (blocks of higher-priority streams are
  // scheduled first): the write-back is never on a turn's path.
  int least = 0, greatest = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest));
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&write_stream, cudaStreamNonBlocking, least));
  if (options.relay_beside_min_tokens >= 0) {  // else none: relay takes its launches on `stream`
    STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&relay_side.stream, cudaStreamNonBlocking, greatest));
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&relay_side.fork, cudaEventDisableTiming));
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&relay_side.join, cudaEventDisableTiming));
    relay_side.min_context_tokens = options.relay_beside_min_tokens;
  }
  if (absl::Status s = loader.Init(config, {options.kv_read_buffer_layers, options.kv_read_group_tokens,
                                            options.kv_read_copy_bytes, greatest});
      !s.ok()) {
    return s;
  }
  const ModelConfig& c = config;
  if (!kernels::IsDispatchedHeadDim(c.head_dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CUDA backend takes head_dim 64, 80, 96, 128 or 256, not ", c.head_dim));
  }
  const int group = c.num_heads / c.num_kv_heads;
  if (!kernels::IsDispatchedGqaGroupSize(group)) {
    return absl::InvalidArgumentError(absl::StrCat("the CUDA backend takes 1 to ", kernels::kMaxGqaGroupSize,
                                                   " query heads per KV head (a divisor of the heads), not ", group));
  }
  if (c.qk_norm && c.qkv_bias) {
    return absl::InvalidArgumentError("the CUDA backend takes q/k norms (Qwen3) without a QKV bias");
  }
  return absl::OkStatus();
}

absl::Status CudaModel::Impl::ReserveStep(int64_t rows, int64_t logit_rows, int64_t decodes, int64_t max_tokens,
                                          const cuda_internal::Step* relay_step) {
  const ModelConfig& c = config;
  // The decode attention's workspace (with relay groups' parts, if the step has any).
  kernels::RelayShape relay{static_cast<int>(std::max<int64_t>(decodes, 1)), 0, 0, 0, c.num_heads, c.num_kv_heads,
                            c.head_dim, max_tokens, 0};
  if (relay_step != nullptr) {
    relay.groups = relay_step->groups;
    relay.grouped_rows = relay_step->grouped_rows;
    relay.max_group_rows = relay_step->max_group_rows;
    relay.max_prefix_tokens = relay_step->prefix_bucket;
  }
  int64_t attn_ws_floats = kernels::RelayDecodeWorkspaceFloats(relay);
  if (relay_step != nullptr && SplitsPrefill(*relay_step)) {  // one after the other on the stream: shared
    attn_ws_floats = std::max(attn_ws_floats, kernels::PrefillAttentionWorkspaceFloats(PrefillShape(*relay_step)));
  }
  const int64_t h = c.hidden_size, qd = c.q_dim(), ffn = c.intermediate_size;
  for (auto [buf, bytes] : {std::pair{&x, 4 * rows * h}, {&proj, 4 * rows * h}, {&hb, 2 * rows * std::max(h, qd)},
                            {&qkv, 4 * rows * qkv_width()}, {&q, 4 * rows * qd}, {&attn, 4 * rows * qd},
                            {&ab, 2 * rows * qd}, {&gu, 4 * rows * 2 * ffn}, {&act, 2 * rows * ffn},
                            {&logits, 4 * logit_rows * c.vocab_size}, {&lb, 2 * logit_rows * h},
                            {&attn_ws, 4 * attn_ws_floats}}) {
    if (absl::Status s = buf->Reserve(bytes, &generation); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> CudaModel::Impl::StartLoads() {
  if (!loader.has_queued()) return loader.last_ticket();
  if (absl::Status s = UseDevice(); !s.ok()) return s;
  // No save reads pages a load writes: the engine keeps a saving sequence (and its pages)
  // until KvSavesDone.
  return loader.Start(pool, weights.inv_freq);
}

absl::Status CudaModel::Impl::FinishKvTransfers() {
  if (absl::Status s = UseDevice(); !s.ok()) return s;
  if (absl::StatusOr<uint64_t> started = StartLoads(); !started.ok()) return started.status();
  if (absl::Status s = loader.Finish(); !s.ok()) return s;
  return FinishSaves();
}

absl::Status CudaModel::Impl::TuneDecodeProducts() {
  const ModelConfig& c = config;
  const int64_t most = ProductRows(options.tuned_decode_rows, /*decode_only=*/true);
  if (most <= 0 || c.num_layers == 0) return absl::OkStatus();
  if (absl::Status s = ReserveStep(most, most, 1, 1); !s.ok()) return s;
  // The inputs' contents do not change a product's time; zeros keep them defined.
  for (cuda_internal::DeviceBuffer* in : {&hb, &ab, &act, &lb}) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(in->as<void>(), 0, static_cast<size_t>(in->bytes()), stream));
  }
  const int h = c.hidden_size, qd = c.q_dim(), ffn = c.intermediate_size;
  const cuda_internal::LayerDevice& L = weights.layers[0];
  // Row counts as ProductRows gives them: 1..16 one by one, then multiples of 8. Each
  // product takes the path a decode step gives it (the skinny kernel's are not tuned).
  for (int64_t r = 1; r <= most; r = r < kernels::kSkinnyMatMulMaxRows ? r + 1 : ProductRows(r + 1, true)) {
    const int rows = static_cast<int>(r);
    for (kernels::MatMulBf16Params p :
         {kernels::MatMulBf16Params{hb.as<uint16_t>(), L.wqkv, qkv.as<float>(), rows, h, qkv_width()},
          {ab.as<uint16_t>(), L.wo, proj.as<float>(), rows, qd, h},
          {hb.as<uint16_t>(), L.wgu, gu.as<float>(), rows, h, 2 * ffn},
          {act.as<uint16_t>(), L.wdown, proj.as<float>(), rows, ffn, h},
          {lb.as<uint16_t>(), weights.lm_head, logits.as<float>(), rows, h, c.vocab_size}}) {
      p.path = ProductPath(/*decode=*/true, p.in_dim, p.out_dim);
      p.tune = true;
      if (absl::Status s = kernels::LaunchMatMulBf16(p, stream); !s.ok()) return s;
    }
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::Status CudaModel::Impl::AllocatePool() {
  const ModelConfig& c = config;
  // Workspaces for a typical step first, so the pool does not take their room.
  if (absl::Status s = ReserveStep(options.initial_step_tokens, 64, 64, c.max_context); !s.ok()) return s;
  if (options.tune_matmuls) {
    if (absl::Status s = TuneDecodeProducts(); !s.ok()) return s;
  }
  pool.set_release_fence([this](const cuda_internal::CudaSequence& seq) { FenceLoadsInto(seq); });
  return pool.Allocate(c, options);
}

void CudaModel::Impl::FenceLoadsInto(const cuda_internal::CudaSequence& seq) {
  if (loader.has_queued_for(seq)) {
    if (absl::StatusOr<uint64_t> started = StartLoads(); !started.ok()) {
      LOG(WARNING) << "starting the loads into a sequence that ends failed: " << started.status();
    }
  }
  if (seq.load_ticket() == 0) return;
  absl::StatusOr<bool> done = loader.Done(seq.load_ticket());
  if (done.ok() && *done) return;
  // Not done, or a device fault (then the wait returns at once: nothing runs any more).
  if (cudaEvent_t placed = loader.all_placed(); placed != nullptr && cudaEventSynchronize(placed) != cudaSuccess) {
    cudaGetLastError();
  }
}

int CudaModel::DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<CudaModel::Impl>> CudaModel::Impl::Make(const ModelConfig& config,
                                                                       const CudaModelOptions& options,
                                                                       uint64_t fingerprint) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->options = options;
  impl->graphs.set_enabled(options.cuda_graphs);
  impl->fingerprint = fingerprint;
  if (absl::Status s = impl->Init(options.device); !s.ok()) return s;
  if (absl::Status s = impl->weights.Layout(impl->config, config.qkv_bias); !s.ok()) return s;
  return impl;
}

absl::StatusOr<std::unique_ptr<CudaModel>> CudaModel::Create(const ModelWeights& weights,
                                                             const CudaModelOptions& options) {
  // The stored KV is bf16: another format than the CPU backend's for the same weights.
  auto made = Impl::Make(weights.config(), options, weights.fingerprint() ^ 0xbf16bf16bf16bf16ull);
  if (!made.ok()) return made.status();
  std::unique_ptr<Impl> impl = *std::move(made);
  if (absl::Status s = impl->weights.Upload(impl->config, weights); !s.ok()) return s;
  if (absl::Status s = impl->AllocatePool(); !s.ok()) return s;
  return std::unique_ptr<CudaModel>(new CudaModel(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<CudaModel>> CudaModel::CreateRandom(const ModelConfig& config, uint64_t seed,
                                                                   const CudaModelOptions& options) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  ModelConfig no_bias = config;  // random weights come without the optional QKV bias
  no_bias.qkv_bias = false;
  auto made = Impl::Make(no_bias, options, seed * 0x9e3779b97f4a7c15ull + 0xbf16);
  if (!made.ok()) return made.status();
  std::unique_ptr<Impl> impl = *std::move(made);
  cudaStream_t st = impl->stream;
  if (absl::Status s = impl->weights.FillRandom(impl->config, seed, st); !s.ok()) return s;
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
  if (absl::Status s = impl->AllocatePool(); !s.ok()) return s;
  return std::unique_ptr<CudaModel>(new CudaModel(std::move(impl)));
}

CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;

absl::Status CudaModel::RegisterHostMemory(absl::Span<std::byte> memory) {
  Impl& m = *impl_;
  if (m.registered != nullptr || memory.empty()) return absl::OkStatus();
  // Pins (and so commits) the whole arena: the host tier is meant to be pinned memory.
  if (absl::Status s = m.UseDevice(); !s.ok()) return s;
  if (cudaError_t e = cudaHostRegister(memory.data(), memory.size(), cudaHostRegisterDefault); e != cudaSuccess) {
    cudaGetLastError();  // not left for the next launch's check to report
    return kernels::CudaStatus(e, "cudaHostRegister", __FILE__, __LINE__);
  }
  m.registered = memory.data();
  m.registered_bytes = static_cast<int64_t>(memory.size());
  // Its device mapping, asked once: saves gather into it (kv_save_direct_blocks).
  void* mapped = nullptr;
  if (cudaHostGetDevicePointer(&mapped, memory.data(), 0) == cudaSuccess) {
    m.registered_on_device = static_cast<std::byte*>(mapped);
  } else {
    cudaGetLastError();  // saves take the staged path
  }
  return absl::OkStatus();
}

absl::Status CudaModel::PrepareKvSaves(const storage::ChunkLayout& layout) {
  Impl& m = *impl_;
  if (m.saves_pending) return absl::OkStatus();  // saves have run: what they need is there
  if (absl::Status s = m.UseDevice(); !s.ok()) return s;
  return m.ReserveSaveIndex(0, layout.PayloadBytes());  // what the first save would reserve
}

absl::Status CudaModel::RandomizeKvPool(uint64_t seed) {
  Impl& m = *impl_;
  if (absl::Status s = m.FinishKvTransfers(); !s.ok()) return s;
  if (absl::Status s = m.pool.Randomize(seed, m.stream); !s.ok()) return s;
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  return absl::OkStatus();
}

void CudaModel::set_prefill_key_splits(bool on) { impl_->options.prefill_key_splits = on; }

void CudaModel::set_skinny_matmul(bool on) {
  if (impl_->options.skinny_matmul == on) return;
  impl_->options.skinny_matmul = on;
  impl_->graphs.Drop();  // they were captured with the other kernel
}

void CudaModel::set_tune_matmuls(bool on) {
  if (impl_->options.tune_matmuls == on) return;
  impl_->options.tune_matmuls = on;
  impl_->graphs.Drop();  // they were captured with the other products
}

const ModelConfig& CudaModel::config() const { return impl_->config; }
uint64_t CudaModel::fingerprint() const { return impl_->fingerprint; }
int64_t CudaModel::weight_bytes() const { return impl_->weights.bytes; }
int64_t CudaModel::pool_pages() const { return impl_->pool.pages(); }
int64_t CudaModel::free_pages() const { return impl_->pool.free_pages(); }
int CudaModel::page_tokens() const { return impl_->options.page_tokens; }
int64_t CudaModel::kv_capacity_tokens() const { return impl_->pool.pages() * impl_->options.page_tokens; }

absl::StatusOr<std::unique_ptr<SequenceState>> CudaModel::NewSequence(int64_t capacity_tokens) {
  Impl& m = *impl_;
  if (capacity_tokens <= 0 || capacity_tokens > m.config.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("a sequence of ", capacity_tokens,
                                                   " tokens does not fit the context of ", m.config.max_context));
  }
  return m.pool.NewSequence(capacity_tokens);
}

absl::Status CudaModel::ResizeSequence(SequenceState& seq, int64_t capacity_tokens) {
  Impl& m = *impl_;
  auto* s = dynamic_cast<CudaSequence*>(&seq);
  if (s == nullptr || s->pool() != &m.pool) return absl::InvalidArgumentError("a sequence of another backend");
  // A sequence on a prefix counts its own tokens, after the prefix's.
  if (capacity_tokens <= 0 || s->first() + capacity_tokens > m.config.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("a sequence of ", s->first() + capacity_tokens,
                                                   " tokens does not fit the context of ", m.config.max_context));
  }
  return m.pool.Resize(*s, s->first() + capacity_tokens);
}

bool CudaModel::shares_prefixes() const { return impl_->options.share_prefixes; }

absl::StatusOr<std::unique_ptr<SequenceState>> CudaModel::NewSequenceOnPrefix(
    std::shared_ptr<const SequenceState> prefix, int64_t prefix_tokens, int64_t capacity_tokens) {
  Impl& m = *impl_;
  if (!m.options.share_prefixes) return absl::UnimplementedError("cuda: sharing prefixes is off");
  auto p = std::dynamic_pointer_cast<const CudaSequence>(prefix);
  if (p == nullptr || p->pool() != &m.pool) return absl::InvalidArgumentError("a prefix of another backend");
  if (p->on_prefix()) return absl::InvalidArgumentError("a prefix on a prefix");
  if (prefix_tokens <= 0 || prefix_tokens > p->capacity()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a shared prefix of ", prefix_tokens, " tokens from a sequence of ", p->capacity()));
  }
  if (capacity_tokens <= 0 || prefix_tokens + capacity_tokens > m.config.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("a sequence of ", prefix_tokens, " + ", capacity_tokens,
                                                   " tokens does not fit the context of ", m.config.max_context));
  }
  if (absl::Status s = m.UseDevice(); !s.ok()) return s;
  return m.pool.NewSequenceOn(std::move(p), prefix_tokens, capacity_tokens, m.stream);
}

absl::Status CudaModel::Forward(absl::Span<const ForwardEntry> batch) {
  Impl& m = *impl_;
  if (absl::Status s = m.UseDevice(); !s.ok()) return s;
  // Loads queued for this step's sequences start now, beside it: its layers wait for
  // theirs one by one (so the step runs eagerly). Saves run beside it: they read
  // sequences the step does not touch (see SaveKv).
  if (absl::StatusOr<uint64_t> started = m.StartLoads(); !started.ok()) return started.status();
  const bool wait_loads = m.loader.waits_pending();
  const ModelConfig& c = m.config;
  StepPlan plan;
  const int64_t relay_min = m.options.share_prefixes && m.options.relay_attention
                                ? std::max<int64_t>(0, m.options.relay_min_saved_tokens)
                                : -1;
  if (absl::Status s = cuda_internal::PlanStep(batch, c, m.pool, m.graphs.enabled() && !wait_loads, relay_min, &plan);
      !s.ok()) {
    return s;
  }
  if (!m.options.split_uneven_rows) plan.step.typical_tokens = 0;
  if (plan.rows == 0) return absl::OkStatus();
  const cuda_internal::Step& step = plan.step;
  const int64_t logit_rows = plan.logit_rows;
  const int64_t generation = m.generation;
  for (absl::Status s : {m.host_meta.Reserve(step.meta.bytes, &m.generation),
                         m.meta.Reserve(step.meta.bytes, &m.generation),
                         m.argmax_host.Reserve(4 * std::max<int64_t>(logit_rows, 1), &m.generation),
                         m.argmax_dev.Reserve(4 * std::max<int64_t>(logit_rows, 1), &m.generation),
                         m.ReserveStep(m.ProductRows(plan.rows, step.decodes == plan.rows),
                                       std::max<int64_t>(m.ProductRows(logit_rows, step.decodes == plan.rows), 1),
                                       step.decodes, step.max_tokens, &step)}) {
    if (!s.ok()) return s;
  }
  if (m.generation != generation) m.graphs.Drop();  // a buffer moved: captured addresses are stale
  const std::vector<size_t> token_entry = cuda_internal::PackStep(batch, plan, m.pool, m.host_meta.data());

  if (wait_loads) {
    if (absl::Status s = m.ReserveStallEvents(); !s.ok()) return s;
  }
  DrainOnError drain(m.stream);
  absl::Status run = plan.graph ? m.graphs.Run(cuda_internal::GraphShapeOf(step), m.stream,
                                               [&] { return m.Enqueue(step, /*wait_loads=*/false); })
                                : m.Enqueue(step, wait_loads);
  if (!run.ok()) return run;
  if (wait_loads) m.loader.WaitedAll();  // later steps follow this one on the stream
  // Logits asked for come back whole.
  for (size_t j = 0; j < token_entry.size(); ++j) {
    const ForwardEntry& e = batch[token_entry[j]];
    if (e.logits == nullptr) continue;
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(e.logits, m.logits.as<float>() + j * c.vocab_size,
                                                4 * static_cast<size_t>(c.vocab_size), cudaMemcpyDeviceToHost,
                                                m.stream));
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  drain.Done();
  if (wait_loads) m.CountStall();
  const auto* drawn = reinterpret_cast<const int32_t*>(m.argmax_host.data());
  for (size_t j = 0; j < token_entry.size(); ++j) {
    const ForwardEntry& e = batch[token_entry[j]];
    if (e.token != nullptr) *e.token = drawn[j];
  }
  return absl::OkStatus();
}

absl::Status CudaModel::LoadKv(SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                               const storage::ChunkLayout& layout) {
  return LoadKvRows(seq, begin, count, payload, layout, 0);
}

absl::Status CudaModel::LoadKvRows(SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                                   const storage::ChunkLayout& layout, int first_row) {
  Impl& m = *impl_;
  const auto* s = dynamic_cast<const CudaSequence*>(&seq);
  if (absl::Status st = cuda_internal::CheckChunk(m.config, s, m.pool, begin, count, payload.size(), layout);
      !st.ok()) {
    return st;
  }
  if (first_row < 0 || first_row + count > layout.chunk_tokens) {
    return absl::InvalidArgumentError("stored KV rows past the chunk's end");
  }
  if (count == 0) return absl::OkStatus();
  if (m.loader.has_queued() && !(m.loader.queued_layout() == layout)) {
    if (absl::StatusOr<uint64_t> started = m.StartLoads(); !started.ok()) return started.status();
  }
  m.loader.Queue(*s, begin, count, payload.data(), layout, first_row);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> CudaModel::StartKvTransfers() { return impl_->StartLoads(); }

KvTransferStats CudaModel::kv_transfer_stats() const {
  const Impl& m = *impl_;
  const cuda_internal::KvLoader::Totals loads = m.loader.totals();
  KvTransferStats s;
  s.loads = loads.loads;
  s.load_bytes = loads.bytes;
  s.load_seconds = loads.seconds;
  absl::MutexLock lock(&m.stats_mu);
  s.load_stall_seconds = m.load_stall_seconds;
  s.save_bytes = m.save_bytes;
  return s;
}

absl::Status CudaModel::Impl::ReserveStallEvents() {
  const size_t want = 2 * static_cast<size_t>(config.num_layers);
  while (stall_events.size() < want) {
    cudaEvent_t e = nullptr;
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    stall_events.push_back(e);
  }
  return absl::OkStatus();
}

void CudaModel::Impl::CountStall() {
  double seconds = 0;
  for (size_t l = 0; 2 * l + 1 < stall_events.size(); ++l) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, stall_events[2 * l], stall_events[2 * l + 1]) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    seconds += ms / 1000.0;
  }
  absl::MutexLock lock(&stats_mu);
  load_stall_seconds += seconds;
}

absl::StatusOr<bool> CudaModel::KvTransfersDone(uint64_t ticket) {
  if (absl::Status s = impl_->UseDevice(); !s.ok()) return s;
  return impl_->loader.Done(ticket);
}

absl::Status CudaModel::FinishKvTransfers() { return impl_->FinishKvTransfers(); }

CUstream_st* CudaModel::LoadCopyStreamForTesting() const { return impl_->loader.copy_stream(); }
CUstream_st* CudaModel::LoadPlaceStreamForTesting() const { return impl_->loader.place_stream(); }
CUstream_st* CudaModel::WriteStreamForTesting() const { return impl_->write_stream; }

}  // namespace strata::model
