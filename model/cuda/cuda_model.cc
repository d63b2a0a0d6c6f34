#include "model/cuda/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"

#if defined(STRATA_WITH_CUDA)
#include <cuda_runtime_api.h>

#include <unordered_map>

#include "kernels/attention/decode.h"
#include "kernels/attention/paged_kv.h"
#include "kernels/attention/prefill.h"
#include "kernels/cuda_check.h"
#include "kernels/elementwise/bf16.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gemm/gemm.h"
#include "kernels/norm/norm.h"
#include "kernels/rope/rope.h"
#include "kernels/rope/rope_cpu.h"
#include "kernels/sampling/sampling.h"
#endif

namespace strata::model {

#if defined(STRATA_WITH_CUDA)

namespace {

// A device allocation with one owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Free(); }

  absl::Status Allocate(int64_t bytes) {
    Free();
    if (bytes <= 0) return absl::OkStatus();
    if (cudaError_t e = cudaMalloc(&ptr_, static_cast<size_t>(bytes)); e != cudaSuccess) {
      ptr_ = nullptr;
      cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
      if (e == cudaErrorMemoryAllocation) {
        return absl::ResourceExhaustedError(absl::StrCat("the GPU has no room for ", bytes, " more bytes"));
      }
      return kernels::CudaStatus(e, "cudaMalloc", __FILE__, __LINE__);
    }
    bytes_ = bytes;
    return absl::OkStatus();
  }
  // Grows (never shrinks) to at least `bytes`; the contents are not kept. Counts a move
  // in `*generation`.
  absl::Status Reserve(int64_t bytes, int64_t* generation) {
    if (bytes <= bytes_) return absl::OkStatus();
    ++*generation;
    return Allocate(bytes + bytes / 4);
  }
  void Free() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  int64_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

// Pinned host memory, grown on demand.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }
  absl::Status Reserve(int64_t bytes, int64_t* generation) {
    if (bytes <= bytes_) return absl::OkStatus();
    ++*generation;
    bytes = std::max<int64_t>(bytes + bytes / 4, 4096);
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    if (cudaError_t e = cudaMallocHost(&ptr_, static_cast<size_t>(bytes)); e != cudaSuccess) {
      ptr_ = nullptr;
      cudaGetLastError();  // not left for the next launch's check to report
      return kernels::CudaStatus(e, "cudaMallocHost", __FILE__, __LINE__);
    }
    bytes_ = bytes;
    return absl::OkStatus();
  }
  std::byte* data() const { return static_cast<std::byte*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

struct LayerDevice {
  const float* attn_norm;
  const uint16_t* wqkv;  // [q_dim + 2 kv_dim][hidden]
  const float* bqkv;     // [q_dim + 2 kv_dim] or null
  const uint16_t* wo;    // [hidden][q_dim]
  const float* mlp_norm;
  const uint16_t* wgu;    // [2 ffn][hidden]: gate rows, then up rows
  const uint16_t* wdown;  // [hidden][ffn]
};

int64_t AlignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// Waits for the model's stream when a method returns early on an error after enqueueing
// work, so nothing in flight still reads a buffer the caller frees or reuses next.
class DrainOnError {
 public:
  explicit DrainOnError(cudaStream_t stream) : stream_(stream) {}
  DrainOnError(const DrainOnError&) = delete;
  DrainOnError& operator=(const DrainOnError&) = delete;
  ~DrainOnError() {
    if (stream_ == nullptr) return;
    cudaStreamSynchronize(stream_);
    cudaGetLastError();
  }
  void Done() { stream_ = nullptr; }  // the method synchronised on its own

 private:
  cudaStream_t stream_;
};

// Lays out one flat allocation: each Add returns the offset of a new region.
struct Arena {
  int64_t size = 0;
  int64_t Add(int64_t bytes) {
    const int64_t at = size;
    size = AlignUp(size + bytes, 256);
    return at;
  }
};

}  // namespace

// A sequence's pages in the pool; gives them back when it ends.
class CudaSequence final : public SequenceState {
 public:
  CudaSequence(CudaModel::Impl* owner, std::vector<int32_t> pages, int64_t capacity)
      : owner_(owner), pages_(std::move(pages)), capacity_(capacity) {}
  ~CudaSequence() override;
  const std::vector<int32_t>& pages() const { return pages_; }
  int64_t capacity() const { return capacity_; }
  const CudaModel::Impl* owner() const { return owner_; }

 private:
  CudaModel::Impl* owner_;
  std::vector<int32_t> pages_;
  int64_t capacity_;
};

struct CudaModel::Impl {
  ModelConfig config;
  uint64_t fingerprint = 0;
  CudaModelOptions options;
  cudaStream_t stream = nullptr;

  DeviceBuffer weights;
  int64_t weight_bytes = 0;
  const uint16_t* embedding = nullptr;
  const uint16_t* lm_head = nullptr;
  const float* final_norm = nullptr;
  const float* inv_freq = nullptr;
  std::vector<LayerDevice> layers;

  // The pool: three planes, each [layers][pages * page_tokens][kv_dim] bf16.
  DeviceBuffer k_rot, k_raw, v;
  int64_t pages = 0;
  int64_t layer_stride = 0;  // values
  std::vector<int32_t> free_pages;

  // Step workspaces.
  DeviceBuffer x, proj, hb, qkv, q, attn, ab, gu, act, logits, lb, attn_ws, meta, stored, argmax_dev;
  PinnedBuffer host_meta, argmax_host;
  int64_t generation = 0;  // bumped whenever a buffer above moves

  // Captured decode steps by (rows << 32 | context bucket); null: seen once, not captured.
  static constexpr size_t kMaxGraphs = 256;
  std::unordered_map<uint64_t, cudaGraphExec_t> graphs;
  bool use_graphs = true;

  void* registered = nullptr;  // host memory pinned by RegisterHostMemory

  ~Impl() {
    if (registered != nullptr) cudaHostUnregister(registered);
    DropGraphs();
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  struct Step;
  // Enqueues one step's work on the stream: the metadata copy, the layers, the greedy
  // tokens' copy back to argmax_host. Nothing in it synchronises, so it can be captured.
  absl::Status Enqueue(const Step& step);
  absl::Status RunGraph(const Step& step);
  void DropGraphs();

  int qkv_width() const { return config.q_dim() + 2 * config.kv_dim(); }
  // Makes the model's GPU current on the calling thread (the engine loop is not the
  // thread that created the model).
  absl::Status UseDevice() const {
    thread_local int current = -1;
    if (current != options.device) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
      current = options.device;
    }
    return absl::OkStatus();
  }
  kernels::PagedKv LayerKv(int l, const int32_t* indptr, const int32_t* indices, const int32_t* last) const {
    return kernels::PagedKv{k_rot.as<uint16_t>() + l * layer_stride, v.as<uint16_t>() + l * layer_stride,
                            options.page_tokens, config.num_kv_heads, config.head_dim, indptr, indices, last};
  }
  int64_t Slot(const CudaSequence& s, int64_t pos) const {
    return int64_t{s.pages()[static_cast<size_t>(pos / options.page_tokens)]} * options.page_tokens +
           pos % options.page_tokens;
  }

  // A model of `config` on options.device with its weight storage laid out (not filled).
  static absl::StatusOr<std::unique_ptr<Impl>> Make(const ModelConfig& config, const CudaModelOptions& options,
                                                    uint64_t fingerprint);
  absl::Status Init(int device);
  absl::Status LayoutWeights(bool qkv_bias);
  absl::Status AllocatePool();
  // Grows the step workspaces for `rows` rows, `logit_rows` sampled rows and `decodes`
  // decode rows over at most `max_tokens` tokens.
  absl::Status ReserveStep(int64_t rows, int64_t logit_rows, int64_t decodes, int64_t max_tokens);
  // For moving `count` tokens of `seq` from `begin` between a chunk payload of
  // `payload_bytes` and the pool: makes the GPU current, grows the staging buffers and
  // writes the tokens' slots ([count] int64, at host_meta) and positions ([count] int32,
  // after them) for one copy to `meta`.
  absl::Status StageChunk(const CudaSequence& seq, int64_t begin, int count, int64_t payload_bytes);
};

CudaSequence::~CudaSequence() {
  for (int32_t p : pages_) owner_->free_pages.push_back(p);
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
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const ModelConfig& c = config;
  if (c.head_dim != 64 && c.head_dim != 128) {
    return absl::InvalidArgumentError(absl::StrCat("the CUDA backend takes head_dim 64 or 128, not ", c.head_dim));
  }
  const int group = c.num_heads / c.num_kv_heads;
  if (group != 1 && group != 2 && group != 4 && group != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CUDA backend takes 1, 2, 4 or 8 query heads per KV head, not ", group));
  }
  return absl::OkStatus();
}

// One allocation for every weight; fills the pointers.
absl::Status CudaModel::Impl::LayoutWeights(bool qkv_bias) {
  const ModelConfig& c = config;
  const int64_t h = c.hidden_size, w = qkv_width(), ffn = c.intermediate_size, qd = c.q_dim();
  Arena a;
  const int64_t emb = a.Add(2 * c.vocab_size * h);
  const int64_t head = c.tie_embeddings ? emb : a.Add(2 * c.vocab_size * h);
  const int64_t fnorm = a.Add(4 * h);
  const int64_t freq = a.Add(4 * c.head_dim / 2);
  struct Offsets {
    int64_t attn_norm, wqkv, bqkv, wo, mlp_norm, wgu, wdown;
  };
  std::vector<Offsets> off(static_cast<size_t>(c.num_layers));
  for (Offsets& o : off) {
    o.attn_norm = a.Add(4 * h);
    o.wqkv = a.Add(2 * w * h);
    o.bqkv = qkv_bias ? a.Add(4 * w) : -1;
    o.wo = a.Add(2 * h * qd);
    o.mlp_norm = a.Add(4 * h);
    o.wgu = a.Add(2 * 2 * ffn * h);
    o.wdown = a.Add(2 * h * ffn);
  }
  if (absl::Status s = weights.Allocate(a.size); !s.ok()) return s;
  weight_bytes = a.size;
  auto* base = weights.as<std::byte>();
  embedding = reinterpret_cast<const uint16_t*>(base + emb);
  lm_head = reinterpret_cast<const uint16_t*>(base + head);
  final_norm = reinterpret_cast<const float*>(base + fnorm);
  inv_freq = reinterpret_cast<const float*>(base + freq);
  layers.clear();
  for (const Offsets& o : off) {
    layers.push_back(LayerDevice{reinterpret_cast<const float*>(base + o.attn_norm),
                                 reinterpret_cast<const uint16_t*>(base + o.wqkv),
                                 o.bqkv >= 0 ? reinterpret_cast<const float*>(base + o.bqkv) : nullptr,
                                 reinterpret_cast<const uint16_t*>(base + o.wo),
                                 reinterpret_cast<const float*>(base + o.mlp_norm),
                                 reinterpret_cast<const uint16_t*>(base + o.wgu),
                                 reinterpret_cast<const uint16_t*>(base + o.wdown)});
  }
  const std::vector<float> freqs = kernels::RopeInvFreq(c.head_dim, c.rope_theta, c.rope_scaling);
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpy(const_cast<float*>(inv_freq), freqs.data(), freqs.size() * sizeof(float),
                                         cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status CudaModel::Impl::ReserveStep(int64_t rows, int64_t logit_rows, int64_t decodes, int64_t max_tokens) {
  const ModelConfig& c = config;
  const int64_t h = c.hidden_size, qd = c.q_dim(), ffn = c.intermediate_size;
  for (auto [buf, bytes] : {std::pair{&x, 4 * rows * h}, {&proj, 4 * rows * h}, {&hb, 2 * rows * std::max(h, qd)},
                            {&qkv, 4 * rows * qkv_width()}, {&q, 4 * rows * qd}, {&attn, 4 * rows * qd},
                            {&ab, 2 * rows * qd}, {&gu, 4 * rows * 2 * ffn}, {&act, 2 * rows * ffn},
                            {&logits, 4 * logit_rows * c.vocab_size}, {&lb, 2 * logit_rows * h},
                            {&attn_ws, 4 * kernels::DecodeWorkspaceFloats(static_cast<int>(std::max<int64_t>(decodes, 1)), c.num_heads,
                                                                          c.head_dim, max_tokens)}}) {
    if (absl::Status s = buf->Reserve(bytes, &generation); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CudaModel::Impl::StageChunk(const CudaSequence& seq, int64_t begin, int count, int64_t payload_bytes) {
  if (absl::Status s = UseDevice(); !s.ok()) return s;
  const int64_t before = generation;
  for (absl::Status s : {stored.Reserve(payload_bytes, &generation), host_meta.Reserve(12 * int64_t{count}, &generation),
                         meta.Reserve(12 * int64_t{count}, &generation)}) {
    if (!s.ok()) return s;
  }
  if (generation != before) DropGraphs();  // a buffer moved: captured addresses are stale
  auto* slots = reinterpret_cast<int64_t*>(host_meta.data());
  auto* positions = reinterpret_cast<int32_t*>(host_meta.data() + 8 * int64_t{count});
  for (int i = 0; i < count; ++i) {
    positions[i] = static_cast<int32_t>(begin + i);
    slots[i] = Slot(seq, begin + i);
  }
  return absl::OkStatus();
}

absl::Status CudaModel::Impl::AllocatePool() {
  const ModelConfig& c = config;
  // Workspaces for a typical step first, so the pool does not take their room.
  if (absl::Status s = ReserveStep(options.initial_step_tokens, 64, 64, c.max_context); !s.ok()) return s;
  int64_t bytes = options.kv_pool_bytes;
  if (bytes == 0) {
    size_t free = 0, total = 0;
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free, &total));
    bytes = static_cast<int64_t>(static_cast<double>(free) * options.kv_memory_fraction);
  }
  const int64_t page_bytes = int64_t{3} * c.num_layers * options.page_tokens * c.kv_dim() * 2;
  pages = std::min<int64_t>(bytes / page_bytes, int64_t{1} << 30);
  if (pages < 1) return absl::ResourceExhaustedError("no GPU memory is left for the KV pool");
  layer_stride = pages * options.page_tokens * c.kv_dim();
  for (DeviceBuffer* plane : {&k_rot, &k_raw, &v}) {
    if (absl::Status s = plane->Allocate(2 * layer_stride * c.num_layers); !s.ok()) return s;
  }
  free_pages.clear();
  for (int64_t p = pages - 1; p >= 0; --p) free_pages.push_back(static_cast<int32_t>(p));
  return absl::OkStatus();
}

namespace {

// fp32 host values to bf16 at a device address.
absl::Status UploadBf16(const float* src, int64_t n, const uint16_t* dst) {
  std::vector<uint16_t> tmp(static_cast<size_t>(n));
  kernels::ToBf16(src, tmp.data(), n);
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(const_cast<uint16_t*>(dst), tmp.data(), static_cast<size_t>(n) * 2, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status UploadF32(const float* src, int64_t n, const float* dst) {
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(const_cast<float*>(dst), src, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

}  // namespace

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
  impl->use_graphs = options.cuda_graphs;
  impl->fingerprint = fingerprint;
  if (absl::Status s = impl->Init(options.device); !s.ok()) return s;
  if (absl::Status s = impl->LayoutWeights(config.qkv_bias); !s.ok()) return s;
  return impl;
}

absl::StatusOr<std::unique_ptr<CudaModel>> CudaModel::Create(const ModelWeights& weights,
                                                             const CudaModelOptions& options) {
  // The stored KV is bf16: another format than the CPU backend's for the same weights.
  auto made = Impl::Make(weights.config(), options, weights.fingerprint() ^ 0xbf16bf16bf16bf16ull);
  if (!made.ok()) return made.status();
  std::unique_ptr<Impl> impl = *std::move(made);
  const ModelConfig& c = impl->config;
  const int64_t h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.intermediate_size;
  if (absl::Status s = UploadBf16(weights.embedding(), c.vocab_size * h, impl->embedding); !s.ok()) return s;
  if (!c.tie_embeddings) {
    if (absl::Status s = UploadBf16(weights.lm_head(), c.vocab_size * h, impl->lm_head); !s.ok()) return s;
  }
  if (absl::Status s = UploadF32(weights.final_norm(), h, impl->final_norm); !s.ok()) return s;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = weights.layer(l);
    const LayerDevice& d = impl->layers[static_cast<size_t>(l)];
    for (absl::Status s : {UploadF32(w.attn_norm, h, d.attn_norm), UploadBf16(w.wq, qd * h, d.wqkv),
                           UploadBf16(w.wk, kvd * h, d.wqkv + qd * h), UploadBf16(w.wv, kvd * h, d.wqkv + (qd + kvd) * h),
                           UploadBf16(w.wo, h * qd, d.wo), UploadF32(w.mlp_norm, h, d.mlp_norm),
                           UploadBf16(w.w_gate, ffn * h, d.wgu), UploadBf16(w.w_up, ffn * h, d.wgu + ffn * h),
                           UploadBf16(w.w_down, h * ffn, d.wdown)}) {
      if (!s.ok()) return s;
    }
    if (c.qkv_bias) {
      for (absl::Status s : {UploadF32(w.bq, qd, d.bqkv), UploadF32(w.bk, kvd, d.bqkv + qd),
                             UploadF32(w.bv, kvd, d.bqkv + qd + kvd)}) {
        if (!s.ok()) return s;
      }
    }
  }
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
  const ModelConfig& c = impl->config;
  const int64_t h = c.hidden_size, ffn = c.intermediate_size, qd = c.q_dim();
  cudaStream_t st = impl->stream;
  uint64_t k = seed;
  auto rnd = [&](const uint16_t* p, int64_t n, int64_t fan_in) {
    return kernels::LaunchFillRandomBf16({const_cast<uint16_t*>(p), n, ++k * 0x2545f4914f6cdd1dull,
                                         1.0f / std::sqrt(static_cast<float>(fan_in))}, st);
  };
  auto ones = [&](const float* p, int64_t n) { return kernels::LaunchFillF32({const_cast<float*>(p), n, 1.0f}, st); };
  if (absl::Status s = rnd(impl->embedding, c.vocab_size * h, 1); !s.ok()) return s;
  if (!c.tie_embeddings) {
    if (absl::Status s = rnd(impl->lm_head, c.vocab_size * h, h); !s.ok()) return s;
  }
  if (absl::Status s = ones(impl->final_norm, h); !s.ok()) return s;
  for (const LayerDevice& d : impl->layers) {
    for (absl::Status s : {ones(d.attn_norm, h), rnd(d.wqkv, int64_t{impl->qkv_width()} * h, h),
                           rnd(d.wo, h * qd, qd), ones(d.mlp_norm, h), rnd(d.wgu, 2 * ffn * h, h),
                           rnd(d.wdown, h * ffn, ffn)}) {
      if (!s.ok()) return s;
    }
  }
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
  return absl::OkStatus();
}

absl::Status CudaModel::RandomizeKvPool(uint64_t seed) {
  Impl& m = *impl_;
  if (absl::Status s = m.UseDevice(); !s.ok()) return s;
  const int64_t n = m.layer_stride * m.config.num_layers;
  for (DeviceBuffer* plane : {&m.k_rot, &m.k_raw, &m.v}) {
    if (absl::Status s = kernels::LaunchFillRandomBf16({plane->as<uint16_t>(), n, ++seed, 1.0f}, m.stream); !s.ok()) {
      return s;
    }
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  return absl::OkStatus();
}

const ModelConfig& CudaModel::config() const { return impl_->config; }
uint64_t CudaModel::fingerprint() const { return impl_->fingerprint; }
int64_t CudaModel::weight_bytes() const { return impl_->weight_bytes; }
int64_t CudaModel::pool_pages() const { return impl_->pages; }
int64_t CudaModel::free_pages() const { return static_cast<int64_t>(impl_->free_pages.size()); }
int CudaModel::page_tokens() const { return impl_->options.page_tokens; }
int64_t CudaModel::kv_capacity_tokens() const { return impl_->pages * impl_->options.page_tokens; }

absl::StatusOr<std::unique_ptr<SequenceState>> CudaModel::NewSequence(int64_t capacity_tokens) {
  Impl& m = *impl_;
  if (capacity_tokens <= 0 || capacity_tokens > m.config.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("a sequence of ", capacity_tokens,
                                                   " tokens does not fit the context of ", m.config.max_context));
  }
  const int64_t need = (capacity_tokens + m.options.page_tokens - 1) / m.options.page_tokens;
  if (need > static_cast<int64_t>(m.free_pages.size())) {
    return absl::ResourceExhaustedError(absl::StrCat("the GPU KV pool has ", m.free_pages.size(), " free pages of ",
                                                     m.pages, "; a sequence of ", capacity_tokens, " tokens needs ",
                                                     need));
  }
  std::vector<int32_t> pages(m.free_pages.end() - need, m.free_pages.end());
  m.free_pages.resize(m.free_pages.size() - static_cast<size_t>(need));
  return std::unique_ptr<SequenceState>(std::make_unique<CudaSequence>(&m, std::move(pages), capacity_tokens));
}

namespace {

// The step's index arrays, packed into one pinned block and copied to the device at once.
// Fixed-size arrays first and the page list last, so that steps with the same batch shape
// keep every array at the same address (what a captured graph needs).
struct StepMeta {
  int64_t ids, positions, slots, kv_indptr, last_page_len, logit_rows, temperature, top_p, u, kv_indices, qo_prompt,
      bytes;
};

StepMeta MetaLayout(int64_t rows, int n_seq, int64_t logit_rows, int64_t pages) {
  Arena a;
  StepMeta m{};
  m.ids = a.Add(4 * rows);
  m.positions = a.Add(4 * rows);
  m.slots = a.Add(8 * rows);
  m.kv_indptr = a.Add(4 * (n_seq + 1));
  m.last_page_len = a.Add(4 * n_seq);
  m.logit_rows = a.Add(4 * std::max<int64_t>(logit_rows, 1));
  m.temperature = a.Add(4 * std::max<int64_t>(logit_rows, 1));
  m.top_p = a.Add(4 * std::max<int64_t>(logit_rows, 1));
  m.u = a.Add(8 * std::max<int64_t>(logit_rows, 1));
  m.kv_indices = a.Add(4 * std::max<int64_t>(pages, 1));
  m.qo_prompt = a.Add(4 * (n_seq + 1));
  m.bytes = a.size;
  return m;
}

int64_t ContextBucket(int64_t tokens) {
  int64_t pow2 = 1;
  while (pow2 < tokens) pow2 <<= 1;
  const int64_t grain = std::max<int64_t>(256, pow2 / 16);
  return (tokens + grain - 1) / grain * grain;
}

bool WantsToken(const ForwardEntry& e) { return (e.logits != nullptr || e.token != nullptr) && !e.tokens.empty(); }

}  // namespace

// One step's shape: what the enqueued work depends on besides the metadata's contents.
// Sequences (and their rows) are ordered decodes first: the first `decodes` sequences have
// one new row each (rows [0, decodes)), attended by the decode kernel; the others are
// prompt chunks, attended by the tensor-core prefill kernel.
struct CudaModel::Impl::Step {
  int rows = 0, n_seq = 0, logit_rows = 0;
  int decodes = 0;
  int max_new = 0;         // most new rows of one prompt sequence
  int64_t max_tokens = 0;  // bounds every decode sequence's length (sets the decode kernel's split)
  StepMeta meta{};
};

absl::Status CudaModel::Impl::Enqueue(const Step& step) {
  cudaStream_t st = stream;
  const ModelConfig& c = config;
  const StepMeta& off = step.meta;
  std::byte* dm = meta.as<std::byte>();
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dm, host_meta.data(), static_cast<size_t>(off.bytes), cudaMemcpyHostToDevice, st));
  const auto* d_ids = reinterpret_cast<const int32_t*>(dm + off.ids);
  const auto* d_positions = reinterpret_cast<const int32_t*>(dm + off.positions);
  const auto* d_slots = reinterpret_cast<const int64_t*>(dm + off.slots);
  const auto* d_qo_prompt = reinterpret_cast<const int32_t*>(dm + off.qo_prompt);
  const auto* d_indptr = reinterpret_cast<const int32_t*>(dm + off.kv_indptr);
  const auto* d_indices = reinterpret_cast<const int32_t*>(dm + off.kv_indices);
  const auto* d_last = reinterpret_cast<const int32_t*>(dm + off.last_page_len);
  const auto* d_lrows = reinterpret_cast<const int32_t*>(dm + off.logit_rows);

  const int r = step.rows;
  const int h = c.hidden_size, qd = c.q_dim(), ffn = c.intermediate_size, w = qkv_width();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  float* xs = x.as<float>();
  float* pr = proj.as<float>();
  uint16_t* hs = hb.as<uint16_t>();
#define STRATA_STEP(expr)                         \
  do {                                            \
    absl::Status step_status_ = (expr);           \
    if (!step_status_.ok()) return step_status_;  \
  } while (false)
  STRATA_STEP(kernels::LaunchEmbedBf16({embedding, d_ids, r, h, xs}, st));
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerDevice& L = layers[static_cast<size_t>(l)];
    // Attention block: x += the previous MLP output, normed into hb.
    STRATA_STEP(kernels::LaunchRmsNormToBf16({l == 0 ? nullptr : pr, xs, L.attn_norm, hs, r, h, c.rms_norm_eps}, st));
    STRATA_STEP(kernels::LaunchMatMulBf16({hs, L.wqkv, qkv.as<float>(), r, h, w}, st));
    kernels::QkvPlaceParams qp{qkv.as<float>(), L.bqkv, d_positions, d_slots, r, c.num_heads, c.num_kv_heads,
                               c.head_dim, inv_freq, q.as<float>(), k_rot.as<uint16_t>() + l * layer_stride,
                               k_raw.as<uint16_t>() + l * layer_stride, v.as<uint16_t>() + l * layer_stride};
    STRATA_STEP(kernels::LaunchQkvRopePlace(qp, st));
    if (step.decodes > 0) {
      STRATA_STEP(kernels::LaunchPagedDecodeAttention({q.as<float>(), LayerKv(l, d_indptr, d_indices, d_last),
                                                      step.decodes, c.num_heads, scale, step.max_tokens,
                                                      attn_ws.as<float>(), attn.as<float>(), nullptr}, st));
    }
    if (step.decodes < step.n_seq) {
      const int64_t first = int64_t{step.decodes} * qd;
      STRATA_STEP(kernels::LaunchPagedPrefillAttentionTc(
          {q.as<float>() + first, LayerKv(l, d_indptr + step.decodes, d_indices, d_last + step.decodes), d_qo_prompt,
          step.n_seq - step.decodes, r - step.decodes, c.num_heads, scale, step.max_new, attn.as<float>() + first,
          nullptr}, st));
    }
    STRATA_STEP(kernels::LaunchToBf16({attn.as<float>(), ab.as<uint16_t>(), int64_t{r} * qd}, st));
    STRATA_STEP(kernels::LaunchMatMulBf16({ab.as<uint16_t>(), L.wo, pr, r, qd, h}, st));
    // MLP block.
    STRATA_STEP(kernels::LaunchRmsNormToBf16({pr, xs, L.mlp_norm, hs, r, h, c.rms_norm_eps}, st));
    STRATA_STEP(kernels::LaunchMatMulBf16({hs, L.wgu, gu.as<float>(), r, h, 2 * ffn}, st));
    STRATA_STEP(kernels::LaunchSwiGluToBf16({gu.as<float>(), act.as<uint16_t>(), r, ffn}, st));
    STRATA_STEP(kernels::LaunchMatMulBf16({act.as<uint16_t>(), L.wdown, pr, r, ffn, h}, st));
  }
  if (step.logit_rows > 0) {
    STRATA_STEP(kernels::LaunchRmsNormToBf16({pr, xs, final_norm, hs, r, h, c.rms_norm_eps}, st));
    STRATA_STEP(kernels::LaunchGatherRowsBf16({hs, d_lrows, step.logit_rows, h, lb.as<uint16_t>()}, st));
    STRATA_STEP(kernels::LaunchMatMulBf16({lb.as<uint16_t>(), lm_head, logits.as<float>(), step.logit_rows, h,
                                          c.vocab_size}, st));
    STRATA_STEP(kernels::LaunchSample({logits.as<float>(), step.logit_rows, c.vocab_size,
                                      reinterpret_cast<const float*>(dm + off.temperature),
                                      reinterpret_cast<const float*>(dm + off.top_p),
                                      reinterpret_cast<const double*>(dm + off.u), argmax_dev.as<int32_t>()}, st));
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(argmax_host.data(), argmax_dev.as<int32_t>(),
                                                4 * static_cast<size_t>(step.logit_rows), cudaMemcpyDeviceToHost, st));
  }
#undef STRATA_STEP
  return absl::OkStatus();
}

// Runs a decode step (one token per sequence) through a captured graph: the first
// step of a shape runs eagerly (cuBLAS picks and sets up its kernels), the second captures
// it. Launching ~11 kernels a layer one by one leaves the GPU idle between them; a graph
// launch does not. A capture that fails turns graphs off, with one log line.
absl::Status CudaModel::Impl::RunGraph(const Step& step) {
  const uint64_t key = (static_cast<uint64_t>(step.rows) << 32) | static_cast<uint64_t>(step.max_tokens);
  auto it = graphs.find(key);
  if (it == graphs.end()) {
    // Each graph holds a few hundred nodes: past kMaxGraphs shapes, start the cache over.
    if (graphs.size() >= kMaxGraphs) DropGraphs();
    graphs.emplace(key, nullptr);  // seen once: eager this time
    return Enqueue(step);
  }
  if (it->second == nullptr) {
    cudaGraph_t graph = nullptr;
    STRATA_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    absl::Status enqueued = Enqueue(step);
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    cudaGraphExec_t exec = nullptr;
    if (enqueued.ok() && ended == cudaSuccess) {
      if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) exec = nullptr;
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (exec == nullptr) {
      cudaGetLastError();
      use_graphs = false;
      LOG(WARNING) << "CUDA graph capture failed (" << (enqueued.ok() ? cudaGetErrorString(ended) : enqueued.message())
                   << "); decode steps run without graphs";
      return Enqueue(step);
    }
    it->second = exec;
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, stream));
  return absl::OkStatus();
}

void CudaModel::Impl::DropGraphs() {
  for (auto& [key, exec] : graphs) {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
  graphs.clear();
}

absl::Status CudaModel::Forward(absl::Span<const ForwardEntry> batch) {
  Impl& m = *impl_;
  if (absl::Status s = m.UseDevice(); !s.ok()) return s;
  const ModelConfig& c = m.config;
  const int page = m.options.page_tokens;
  Impl::Step step;
  int64_t rows = 0, total_pages = 0, logit_rows = 0, max_tokens = 0;
  bool graphable = true;  // decodes only, no logits out: a graph can run it
  // Entries in step order: one-row entries (decodes) first, then prompt chunks.
  std::vector<size_t> order;
  order.reserve(batch.size());
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t b = 0; b < batch.size(); ++b) {
      if ((batch[b].tokens.size() == 1) == (pass == 0)) order.push_back(b);
    }
  }
  for (const ForwardEntry& e : batch) {
    const auto* s = dynamic_cast<const CudaSequence*>(e.seq);
    if (s == nullptr || s->owner() != &m) return absl::InvalidArgumentError("a sequence of another backend");
    const int64_t len = e.start_pos + static_cast<int64_t>(e.tokens.size());
    if (e.start_pos < 0 || len > s->capacity()) return absl::InvalidArgumentError("tokens past the sequence's capacity");
    for (int32_t t : e.tokens) {
      if (t < 0 || t >= c.vocab_size) return absl::InvalidArgumentError(absl::StrCat("token ", t, " out of range"));
    }
    rows += static_cast<int64_t>(e.tokens.size());
    total_pages += (len + page - 1) / page;
    logit_rows += WantsToken(e);
    if (e.tokens.size() == 1) {
      ++step.decodes;
      max_tokens = std::max(max_tokens, len);
    } else {
      step.max_new = std::max(step.max_new, static_cast<int>(e.tokens.size()));
    }
    graphable = graphable && e.tokens.size() == 1 && e.logits == nullptr && e.token != nullptr;
  }
  if (rows == 0) return absl::OkStatus();
  step.rows = static_cast<int>(rows);
  step.n_seq = static_cast<int>(batch.size());
  step.logit_rows = static_cast<int>(logit_rows);
  // Decodes are shaped by (batch, context bucket), graph or not: the decode kernel's split
  // along the sequence follows the bucket (parts past a sequence's end are empty), so a
  // graph replay and an eager step of one shape give the same bits. Buckets are 1/16 of
  // the next power of two (at least 256 tokens): fine enough that the split is not sized
  // for much more than the real length, coarse enough that graphs get reused.
  const bool graph = graphable && m.use_graphs;
  step.max_tokens = ContextBucket(max_tokens);
  const int64_t page_capacity = graph ? step.n_seq * ((step.max_tokens + page - 1) / page) : total_pages;
  step.meta = MetaLayout(rows, step.n_seq, logit_rows, page_capacity);
  const int64_t generation = m.generation;
  for (absl::Status s : {m.host_meta.Reserve(step.meta.bytes, &m.generation),
                         m.meta.Reserve(step.meta.bytes, &m.generation),
                         m.argmax_host.Reserve(4 * std::max<int64_t>(logit_rows, 1), &m.generation),
                         m.argmax_dev.Reserve(4 * std::max<int64_t>(logit_rows, 1), &m.generation),
                         m.ReserveStep(rows, std::max<int64_t>(logit_rows, 1), step.decodes, step.max_tokens)}) {
    if (!s.ok()) return s;
  }
  if (m.generation != generation) m.DropGraphs();  // a buffer moved: captured addresses are stale

  std::byte* hm = m.host_meta.data();
  const StepMeta& off = step.meta;
  auto* ids = reinterpret_cast<int32_t*>(hm + off.ids);
  auto* positions = reinterpret_cast<int32_t*>(hm + off.positions);
  auto* slots = reinterpret_cast<int64_t*>(hm + off.slots);
  auto* qo_prompt = reinterpret_cast<int32_t*>(hm + off.qo_prompt);
  auto* kv_indptr = reinterpret_cast<int32_t*>(hm + off.kv_indptr);
  auto* kv_indices = reinterpret_cast<int32_t*>(hm + off.kv_indices);
  auto* last_page_len = reinterpret_cast<int32_t*>(hm + off.last_page_len);
  auto* lrows = reinterpret_cast<int32_t*>(hm + off.logit_rows);
  auto* temperature = reinterpret_cast<float*>(hm + off.temperature);
  auto* top_p = reinterpret_cast<float*>(hm + off.top_p);
  auto* u = reinterpret_cast<double*>(hm + off.u);
  std::vector<size_t> token_entry;  // logit row -> entry
  token_entry.reserve(static_cast<size_t>(logit_rows));
  int64_t row = 0, page_at = 0;
  kv_indptr[0] = 0;
  qo_prompt[0] = 0;
  for (int k = 0; k < step.n_seq; ++k) {
    const ForwardEntry& e = batch[order[static_cast<size_t>(k)]];
    const auto& s = static_cast<const CudaSequence&>(*e.seq);
    for (size_t i = 0; i < e.tokens.size(); ++i, ++row) {
      ids[row] = e.tokens[i];
      positions[row] = static_cast<int32_t>(e.start_pos + static_cast<int64_t>(i));
      slots[row] = m.Slot(s, positions[row]);
    }
    if (k >= step.decodes) qo_prompt[k - step.decodes + 1] = static_cast<int32_t>(row - step.decodes);
    const int64_t len = e.start_pos + static_cast<int64_t>(e.tokens.size());
    const int64_t used = (len + page - 1) / page;
    for (int64_t p = 0; p < used; ++p) kv_indices[page_at++] = s.pages()[static_cast<size_t>(p)];
    kv_indptr[k + 1] = static_cast<int32_t>(page_at);
    last_page_len[k] = static_cast<int32_t>(len - (used - 1) * page);
    if (WantsToken(e)) {
      const size_t lr = token_entry.size();
      temperature[lr] = e.sampling.temperature;
      top_p[lr] = e.sampling.top_p;
      u[lr] = e.sampling.u;
      lrows[lr] = static_cast<int32_t>(row - 1);
      token_entry.push_back(order[static_cast<size_t>(k)]);
    }
  }

  DrainOnError drain(m.stream);
  if (absl::Status s = graph ? m.RunGraph(step) : m.Enqueue(step); !s.ok()) return s;
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
  const auto* drawn = reinterpret_cast<const int32_t*>(m.argmax_host.data());
  for (size_t j = 0; j < token_entry.size(); ++j) {
    const ForwardEntry& e = batch[token_entry[j]];
    if (e.token != nullptr) *e.token = drawn[j];
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckChunk(const ModelConfig& c, const CudaSequence* s, const void* owner, int64_t begin, int count,
                        size_t payload_bytes, const storage::ChunkLayout& layout) {
  if (s == nullptr || s->owner() != owner) return absl::InvalidArgumentError("a sequence of another backend");
  if (layout.layers != c.num_layers || layout.row_bytes != int64_t{c.kv_dim()} * 2 || count < 0 ||
      count > layout.chunk_tokens || begin < 0 || begin + count > s->capacity() ||
      static_cast<int64_t>(payload_bytes) < layout.PayloadBytes()) {
    return absl::InvalidArgumentError("stored KV rows do not fit this model or sequence");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaModel::LoadKv(SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                               const storage::ChunkLayout& layout) {
  Impl& m = *impl_;
  const auto* s = dynamic_cast<const CudaSequence*>(&seq);
  if (absl::Status st = CheckChunk(m.config, s, &m, begin, count, payload.size(), layout); !st.ok()) return st;
  if (count == 0) return absl::OkStatus();
  const int64_t payload_bytes = layout.PayloadBytes();
  if (absl::Status st = m.StageChunk(*s, begin, count, payload_bytes); !st.ok()) return st;
  cudaStream_t st = m.stream;
  DrainOnError drain(st);
  // A copy from pageable memory returns once the payload has been read.
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.stored.as<std::byte>(), payload.data(),
                                              static_cast<size_t>(payload_bytes), cudaMemcpyHostToDevice, st));
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.meta.as<std::byte>(), m.host_meta.data(), 12 * int64_t{count},
                                              cudaMemcpyHostToDevice, st));
  kernels::StoredKvParams p{count, m.config.num_layers, layout.chunk_tokens, m.config.num_kv_heads,
                            m.config.head_dim,
                            reinterpret_cast<const int32_t*>(m.meta.as<std::byte>() + 8 * int64_t{count}),
                            m.meta.as<int64_t>(), m.inv_freq, m.layer_stride, m.k_rot.as<uint16_t>(),
                            m.k_raw.as<uint16_t>(), m.v.as<uint16_t>()};
  if (absl::Status e = kernels::LaunchPlaceStoredKv(m.stored.as<uint16_t>(), p, st); !e.ok()) return e;
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
  drain.Done();
  return absl::OkStatus();
}

absl::Status CudaModel::SaveKv(const SequenceState& seq, int64_t begin, int count, absl::Span<std::byte> payload,
                               const storage::ChunkLayout& layout) {
  Impl& m = *impl_;
  const auto* s = dynamic_cast<const CudaSequence*>(&seq);
  if (absl::Status st = CheckChunk(m.config, s, &m, begin, count, payload.size(), layout); !st.ok()) return st;
  if (count == 0) return absl::OkStatus();
  if (absl::Status st = m.StageChunk(*s, begin, count, layout.PayloadBytes()); !st.ok()) return st;
  cudaStream_t st = m.stream;
  DrainOnError drain(st);
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(m.meta.as<std::byte>(), m.host_meta.data(), 12 * int64_t{count}, cudaMemcpyHostToDevice, st));
  kernels::StoredKvParams p{count, m.config.num_layers, layout.chunk_tokens, m.config.num_kv_heads, m.config.head_dim,
                            nullptr, m.meta.as<int64_t>(), nullptr, m.layer_stride, nullptr,
                            m.k_raw.as<uint16_t>(), m.v.as<uint16_t>()};
  if (absl::Status e = kernels::LaunchGatherStoredKv(p, m.stored.as<uint16_t>(), st); !e.ok()) return e;
  // One strided copy: each (layer, K|V) block's first `count` rows.
  const size_t pitch = static_cast<size_t>(layout.chunk_tokens * layout.row_bytes);
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(payload.data(), pitch, m.stored.as<std::byte>(), pitch,
                                                static_cast<size_t>(count * layout.row_bytes),
                                                static_cast<size_t>(2 * layout.layers), cudaMemcpyDeviceToHost, st));
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
  drain.Done();
  return absl::OkStatus();
}

#else  // !STRATA_WITH_CUDA

struct CudaModel::Impl {
  ModelConfig config;
};

int CudaModel::DeviceCount() { return 0; }

absl::StatusOr<std::unique_ptr<CudaModel>> CudaModel::Create(const ModelWeights&, const CudaModelOptions&) {
  return absl::FailedPreconditionError("strata was built without CUDA (use --device=cpu)");
}
absl::StatusOr<std::unique_ptr<CudaModel>> CudaModel::CreateRandom(const ModelConfig&, uint64_t,
                                                                   const CudaModelOptions&) {
  return absl::FailedPreconditionError("strata was built without CUDA");
}
CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;
const ModelConfig& CudaModel::config() const { return impl_->config; }
uint64_t CudaModel::fingerprint() const { return 0; }
int64_t CudaModel::weight_bytes() const { return 0; }
int64_t CudaModel::pool_pages() const { return 0; }
int64_t CudaModel::free_pages() const { return 0; }
int CudaModel::page_tokens() const { return 0; }
int64_t CudaModel::kv_capacity_tokens() const { return 0; }
absl::Status CudaModel::RandomizeKvPool(uint64_t) { return absl::FailedPreconditionError("no CUDA"); }
absl::Status CudaModel::RegisterHostMemory(absl::Span<std::byte>) { return absl::OkStatus(); }
absl::StatusOr<std::unique_ptr<SequenceState>> CudaModel::NewSequence(int64_t) {
  return absl::FailedPreconditionError("strata was built without CUDA");
}
absl::Status CudaModel::Forward(absl::Span<const ForwardEntry>) {
  return absl::FailedPreconditionError("strata was built without CUDA");
}
absl::Status CudaModel::LoadKv(SequenceState&, int64_t, int, absl::Span<const std::byte>,
                               const storage::ChunkLayout&) {
  return absl::FailedPreconditionError("strata was built without CUDA");
}
absl::Status CudaModel::SaveKv(const SequenceState&, int64_t, int, absl::Span<std::byte>,
                               const storage::ChunkLayout&) {
  return absl::FailedPreconditionError("strata was built without CUDA");
}

#endif

}  // namespace strata::model
