// The paged KV pool as the attention kernels see it: plain index arrays (FlashInfer's
// indptr / indices / last_page_len), so a kernel knows nothing of the scheduler.
#ifndef STRATA_KERNELS_ATTENTION_PAGED_KV_H_
#define STRATA_KERNELS_ATTENTION_PAGED_KV_H_

#include <cstdint>

namespace strata::kernels {

// A paged KV pool (FlashInfer's NHD layout, bf16 stored as uint16_t): page p holds
// page_size tokens, token slot i of page p at (p * page_size + i) * kv_heads * head_dim,
// laid [kv_heads][head_dim]; k_pages and v_pages share the layout. Sequence b owns pages
// indices[indptr[b] .. indptr[b+1]) in order; its last page holds last_page_len[b] tokens
// (1..page_size), every other page is full. K is stored rotated (RoPE applied).
struct PagedKv {
  const uint16_t* k_pages;
  const uint16_t* v_pages;
  int page_size, kv_heads, head_dim;
  const int32_t* indptr;         // [batch + 1]
  const int32_t* indices;        // [indptr[batch]]
  const int32_t* last_page_len;  // [batch]
};

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ATTENTION_PAGED_KV_H_
