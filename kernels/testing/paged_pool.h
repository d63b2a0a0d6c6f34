// A random paged KV pool for kernel tests: sequences of the given lengths, their pages
// shuffled through the pool, K and V random bf16 values in [-2, 2].
#ifndef STRATA_KERNELS_TESTING_PAGED_POOL_H_
#define STRATA_KERNELS_TESTING_PAGED_POOL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention/paged_kv.h"

namespace strata::kernels::test_support {

struct PagedPool {
  int page_size = 0, kv_heads = 0, head_dim = 0;
  std::vector<uint16_t> k, v;
  std::vector<int32_t> indptr, indices, last_page_len;

  // A view over these host vectors (or, with the other overload, device copies of them).
  PagedKv View() const {
    return PagedKv{k.data(), v.data(), page_size, kv_heads, head_dim, indptr.data(), indices.data(),
                   last_page_len.data()};
  }
};

inline uint16_t RandomBf16(std::mt19937& gen) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  const float f = dist(gen);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);  // truncation: any bf16 value will do
}

// The pages of sequences of the given lengths, shuffled through a pool of their pages and
// 3 pages nobody owns (K and V left empty); its size in pages in *total_pages.
inline PagedPool ShuffledPages(const std::vector<int64_t>& lengths, int page_size, std::mt19937& gen,
                               int32_t* total_pages) {
  PagedPool p;
  p.page_size = page_size;
  *total_pages = 3;  // pages nobody owns
  for (int64_t n : lengths) *total_pages += static_cast<int32_t>((n + page_size - 1) / page_size);
  std::vector<int32_t> order(static_cast<size_t>(*total_pages));
  for (int32_t i = 0; i < *total_pages; ++i) order[static_cast<size_t>(i)] = i;
  std::shuffle(order.begin(), order.end(), gen);
  p.indptr.push_back(0);
  size_t next = 0;
  for (int64_t n : lengths) {
    const int64_t pages = (n + page_size - 1) / page_size;
    for (int64_t i = 0; i < pages; ++i) p.indices.push_back(order[next++]);
    p.indptr.push_back(static_cast<int32_t>(p.indices.size()));
    p.last_page_len.push_back(static_cast<int32_t>(n - (pages - 1) * page_size));
  }
  return p;
}

inline PagedPool RandomPagedPool(const std::vector<int64_t>& lengths, int page_size, int kv_heads, int head_dim,
                                 uint32_t seed) {
  std::mt19937 gen(seed);
  int32_t total_pages = 0;
  PagedPool p = ShuffledPages(lengths, page_size, gen, &total_pages);
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  const size_t elements = static_cast<size_t>(total_pages) * page_size * kv_heads * head_dim;
  p.k.resize(elements);
  p.v.resize(elements);
  for (uint16_t& x : p.k) x = RandomBf16(gen);
  for (uint16_t& x : p.v) x = RandomBf16(gen);
  return p;
}

}  // namespace strata::kernels::test_support

#endif  // STRATA_KERNELS_TESTING_PAGED_POOL_H_
