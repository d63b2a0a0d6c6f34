// The forward pass of one step, top to bottom as the model is written: embed; for each
// layer: norm, QKV projection (Qwen3: then the q/k norms), RoPE and KV placement into the
// pool, attention (decode rows, relay groups among them, then prompt rows), O projection
// (the residual add rides on the next norm), norm, gate/up, SwiGLU, down; final norm;
// logits of the sampled rows; sampling.
//
// Everything goes on the model's stream in this order and nothing synchronises (a decode
// step is captured as a graph from here); relay attention may run its system part on the
// side stream, forked from the model's stream and joined back to it inside the launch. A
// step with loads in flight waits, before each layer's attention, for that layer's loads'
// event (and runs eagerly).
#include <cmath>

#include "kernels/attention/decode.h"
#include "kernels/attention/prefill.h"
#include "kernels/attention/relay.h"
#include "kernels/cuda_check.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gemm/gemm.h"
#include "kernels/norm/norm.h"
#include "kernels/rope/rope.h"
#include "kernels/sampling/sampling.h"
#include "model/cuda/cuda_model_impl.h"

namespace strata::model {

using cuda_internal::LayerDevice;
using cuda_internal::Step;
using cuda_internal::StepMeta;

absl::Status CudaModel::Impl::Enqueue(const Step& step, bool wait_loads) {
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
  const auto* d_relay_rows = reinterpret_cast<const int32_t*>(dm + off.relay_rows);
  const auto* d_relay_indptr = reinterpret_cast<const int32_t*>(dm + off.relay_indptr);
  const auto* d_relay_indices = reinterpret_cast<const int32_t*>(dm + off.relay_indices);
  const auto* d_relay_last = reinterpret_cast<const int32_t*>(dm + off.relay_last);

  const int r = step.rows;
  // The prefill's split along the keys shares attn_ws with the decode attention before it.
  float* prefill_ws = SplitsPrefill(step) ? attn_ws.as<float>() : nullptr;
  const int h = c.hidden_size, qd = c.q_dim(), ffn = c.intermediate_size, w = qkv_width();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t layer_stride = pool.layer_stride();
  float* xs = x.as<float>();
  float* pr = proj.as<float>();
  uint16_t* hs = hb.as<uint16_t>();
#define STRATA_STEP(expr)                         \
  do {                                            \
    absl::Status step_status_ = (expr);           \
    if (!step_status_.ok()) return step_status_;  \
  } while (false)
  const bool decode = step.decodes == r;
  const bool tune = decode && options.tune_matmuls;  // cuBLAS's products of decode steps
  // ... for their rows rounded up to a tuned count (rows past r are computed, never read).
  const int pr_rows = static_cast<int>(ProductRows(r, decode));
  const int head_rows = static_cast<int>(ProductRows(step.logit_rows, decode));
  // A step of decodes only: its decode (or relay) attention writes the o projection's bf16
  // input itself (else the attention's fp32 rows are cast after it).
  const bool attention_writes_bf16 = decode;
  // Which kernel each product takes (ProductPath: the skinny kernel for decode steps' large
  // weights, and for the LM head of any step).
  const kernels::MatMulPath qkv_mm = ProductPath(decode, h, w), o_mm = ProductPath(decode, qd, h),
                            gu_mm = ProductPath(decode, h, 2 * ffn), down_mm = ProductPath(decode, ffn, h),
                            head_mm = ProductPath(true, h, c.vocab_size);
  STRATA_STEP(kernels::LaunchEmbedBf16({weights.embedding, d_ids, r, h, xs}, st));
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerDevice& L = weights.layers[static_cast<size_t>(l)];
    // Attention block: x += the previous MLP output, normed into hb.
    STRATA_STEP(kernels::LaunchRmsNormToBf16({l == 0 ? nullptr : pr, xs, L.attn_norm, hs, r, h, c.rms_norm_eps}, st));
    STRATA_STEP(kernels::LaunchMatMulBf16({hs, L.wqkv, qkv.as<float>(), pr_rows, h, w, qkv_mm, tune}, st));
    // Qwen3's q/k norms (each head of q and k normed before RoPE) run inside QkvRopePlace.
    kernels::QkvPlaceParams qp{qkv.as<float>(), L.bqkv, d_positions, d_slots, r, c.num_heads, c.num_kv_heads,
                               c.head_dim, weights.inv_freq, q.as<float>(), pool.k_rot() + l * layer_stride,
                               pool.k_raw() + l * layer_stride, pool.v() + l * layer_stride, L.q_norm, L.k_norm,
                               c.rms_norm_eps};
    STRATA_STEP(kernels::LaunchQkvRopePlace(qp, st));
    // Attention reads the layer's stored KV, loading beside the step: it must have landed.
    // (What comes before touches only the step's own rows: the new tokens' K and V go to
    // slots no load writes.)
    if (wait_loads) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(stall_events[static_cast<size_t>(2 * l)], st));
      STRATA_STEP(loader.WaitLayer(l, st));
      STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(stall_events[static_cast<size_t>(2 * l + 1)], st));
    }
    if (step.groups > 0) {  // relay attention: each group reads its prefix once
      STRATA_STEP(kernels::LaunchRelayDecodeAttention(
          {q.as<float>(), pool.LayerKv(l, d_indptr, d_indices, d_last),
           pool.LayerKv(l, d_relay_indptr, d_relay_indices, d_relay_last), d_relay_rows, step.decodes, step.groups,
           step.grouped_rows, step.max_group_rows, c.num_heads, scale, step.max_tokens, step.prefix_bucket,
           attn_ws.as<float>(), attn.as<float>(), relay_side,
           attention_writes_bf16 ? ab.as<uint16_t>() : nullptr, options.relay_chained_min_tokens,
           step.typical_tokens, options.decode_kernel},
          st));
    } else if (step.decodes > 0) {
      // A step of decodes only: the attention writes the o projection's bf16 input itself.
      kernels::DecodeAttentionParams dp{q.as<float>(), pool.LayerKv(l, d_indptr, d_indices, d_last), step.decodes,
                                        c.num_heads, scale, step.max_tokens, attn_ws.as<float>(), attn.as<float>(),
                                        nullptr};
      dp.typical_tokens = step.typical_tokens;
      dp.kernel = options.decode_kernel;
      if (attention_writes_bf16) dp.out_bf16 = ab.as<uint16_t>();
      STRATA_STEP(kernels::LaunchPagedDecodeAttention(dp, st));
    }
    if (step.decodes < step.n_seq) {
      const int64_t first = int64_t{step.decodes} * qd;
      STRATA_STEP(kernels::LaunchPagedPrefillAttentionTc(
          {q.as<float>() + first, pool.LayerKv(l, d_indptr + step.decodes, d_indices, d_last + step.decodes),
          d_qo_prompt, step.n_seq - step.decodes, r - step.decodes, c.num_heads, scale, step.max_new,
          attn.as<float>() + first, nullptr, false, prefill_ws, step.max_prompt_keys}, st));
    }
    if (!attention_writes_bf16) {
      STRATA_STEP(kernels::LaunchToBf16({attn.as<float>(), ab.as<uint16_t>(), int64_t{r} * qd}, st));
    }
    STRATA_STEP(kernels::LaunchMatMulBf16({ab.as<uint16_t>(), L.wo, pr, pr_rows, qd, h, o_mm, tune}, st));
    // MLP block.
    STRATA_STEP(kernels::LaunchRmsNormToBf16({pr, xs, L.mlp_norm, hs, r, h, c.rms_norm_eps}, st));
    STRATA_STEP(kernels::LaunchMatMulBf16({hs, L.wgu, gu.as<float>(), pr_rows, h, 2 * ffn, gu_mm, tune}, st));
    STRATA_STEP(kernels::LaunchSwiGluToBf16({gu.as<float>(), act.as<uint16_t>(), r, ffn}, st));
    STRATA_STEP(kernels::LaunchMatMulBf16({act.as<uint16_t>(), L.wdown, pr, pr_rows, ffn, h, down_mm, tune}, st));
  }
  if (step.logit_rows > 0) {
    STRATA_STEP(kernels::LaunchRmsNormToBf16({pr, xs, weights.final_norm, hs, r, h, c.rms_norm_eps}, st));
    STRATA_STEP(kernels::LaunchGatherRowsBf16({hs, d_lrows, step.logit_rows, h, lb.as<uint16_t>()}, st));
    STRATA_STEP(kernels::LaunchMatMulBf16({lb.as<uint16_t>(), weights.lm_head, logits.as<float>(), head_rows, h,
                                          c.vocab_size, head_mm, tune}, st));
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

}  // namespace strata::model
