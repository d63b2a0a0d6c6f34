// Raw launches of the device kernels in cuda_kernels.cu, for cuda_kernels.cc only. Kept free
// of Abseil so nvcc never parses it: each returns the launch's cudaError_t (cudaSuccess
// when the kernel was enqueued) and expects arguments already validated, with sizes > 0.
#ifndef STRATA_KERNELS_CUDA_LAUNCH_H_
#define STRATA_KERNELS_CUDA_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::kernels::internal {

cudaError_t RmsNormAsync(const float* x, const float* weight, float* y, int rows, int dim,
                         float eps, cudaStream_t stream);
cudaError_t ArgmaxAsync(const float* logits, int rows, int vocab, int32_t* ids, cudaStream_t stream);
cudaError_t AddRmsNormAsync(const float* x, float* residual, const float* weight, float* y, int rows, int dim,
                            float eps, cudaStream_t stream);
cudaError_t SwiGluAsync(const float* gate, const float* up, float* out, int64_t n,
                        cudaStream_t stream);
cudaError_t EmbedAsync(const float* table, const int32_t* ids, int rows, int dim, float* out,
                       cudaStream_t stream);
cudaError_t ApplyRopeAsync(float* x, const int32_t* positions, int rows, int heads, int head_dim,
                           const float* inv_freq, cudaStream_t stream);

cudaError_t PlaceKvPagedAsync(const float* k_raw, const float* v, const int32_t* positions, const int64_t* slots,
                              int n, int kv_heads, int head_dim, const float* inv_freq, uint16_t* k_pages,
                              uint16_t* v_pages, cudaStream_t stream);

// Paged decode attention, split along the sequence (see cuda_kernels.h). Arguments validated.
cudaError_t PagedDecodeAttentionAsync(const float* q, const uint16_t* k_pages, const uint16_t* v_pages, int page_size,
                                      int kv_heads, int head_dim, const int32_t* indptr, const int32_t* indices,
                                      const int32_t* last_page_len, const int32_t* qo_indptr, int batch, int rows,
                                      int num_heads, float scale, int splits, int split_tokens, float* ws_o,
                                      float* ws_lse, float* out, float* lse, cudaStream_t stream);

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_CUDA_LAUNCH_H_
