#include "kernels/testing/attention_cpu.h"

#include <cstddef>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention/attention_cpu.h"
#include "kernels/elementwise/bf16.h"

namespace strata::kernels {

int64_t PagedSequenceLength(const PagedKv& kv, int b) {
  const int64_t pages = kv.indptr[b + 1] - kv.indptr[b];
  return pages == 0 ? 0 : (pages - 1) * kv.page_size + kv.last_page_len[b];
}

void PagedPrefillAttention(const float* q, const PagedKv& kv, const int32_t* qo_indptr, int batch, int num_heads,
                           float scale, float* out, float* lse) {
  const int64_t row = int64_t{kv.kv_heads} * kv.head_dim;
  std::vector<float> k, v;
  for (int b = 0; b < batch; ++b) {
    const int64_t n = PagedSequenceLength(kv, b);
    const int queries = qo_indptr[b + 1] - qo_indptr[b];
    if (queries == 0) continue;
    k.resize(static_cast<size_t>(n * row));
    v.resize(static_cast<size_t>(n * row));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t page = kv.indices[kv.indptr[b] + t / kv.page_size];
      const int64_t at = (page * kv.page_size + t % kv.page_size) * row;
      for (int64_t i = 0; i < row; ++i) {
        k[static_cast<size_t>(t * row + i)] = Bf16ToFloat(kv.k_pages[at + i]);
        v[static_cast<size_t>(t * row + i)] = Bf16ToFloat(kv.v_pages[at + i]);
      }
    }
    AttentionParams p{};
    p.q = q + int64_t{qo_indptr[b]} * num_heads * kv.head_dim;
    p.k = k.data();
    p.v = v.data();
    p.out = out + int64_t{qo_indptr[b]} * num_heads * kv.head_dim;
    p.lse = lse == nullptr ? nullptr : lse + int64_t{qo_indptr[b]} * num_heads;
    p.num_queries = queries;
    p.num_heads = num_heads;
    p.num_kv_heads = kv.kv_heads;
    p.head_dim = kv.head_dim;
    p.kv_row_stride = row;
    p.first_query_pos = static_cast<int>(n - queries);
    p.scale = scale;
    Attention(p);
  }
}

void PagedDecodeAttention(const float* q, const PagedKv& kv, int batch, int num_heads, float scale, float* out,
                          float* lse) {
  // A decode step is a prefill of one new token per sequence.
  std::vector<int32_t> qo_indptr(static_cast<size_t>(batch) + 1);
  for (int b = 0; b <= batch; ++b) qo_indptr[b] = b;
  PagedPrefillAttention(q, kv, qo_indptr.data(), batch, num_heads, scale, out, lse);
}

}  // namespace strata::kernels
