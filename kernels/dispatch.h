// The one place strata turns runtime attention shapes into template arguments (as
// FlashInfer's DISPATCH_HEAD_DIM / DISPATCH_GQA_GROUP_SIZE in utils.cuh): the head dims and
// query-heads-per-KV-head group sizes the attention kernels are compiled for, and macros that
// run a block of code with the runtime value as a `constexpr int`. Plain C++ (no CUDA, no
// Abseil): host code of the .cu files, the Launch* wrappers' validation and the CPU twins all
// use it, so a shape is supported (or refused) in one place.
//
//   STRATA_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
//     STRATA_DISPATCH_GQA_GROUP_SIZE(group, kGroup, { return Launch<kHeadDim, kGroup>(...); })
//   })
//   return cudaErrorInvalidValue;  // reached only for a shape outside the sets below
//
// A value outside the set runs nothing and falls through to the statement after the macro.
#ifndef STRATA_KERNELS_DISPATCH_H_
#define STRATA_KERNELS_DISPATCH_H_

// Head dims: 64 and 128 (Llama, Mistral, Qwen), 80 and 96 (Phi), 256 (Gemma, some Qwen3).
#define STRATA_HEAD_DIM_CASE(HEAD_DIM, N, ...)    \
  case N: {                                       \
    [[maybe_unused]] constexpr int HEAD_DIM = N;  \
    __VA_ARGS__                                   \
  } break;
#define STRATA_DISPATCH_HEAD_DIM(head_dim, HEAD_DIM, ...) \
  switch (head_dim) {                                     \
    STRATA_HEAD_DIM_CASE(HEAD_DIM, 64, __VA_ARGS__)       \
    STRATA_HEAD_DIM_CASE(HEAD_DIM, 80, __VA_ARGS__)       \
    STRATA_HEAD_DIM_CASE(HEAD_DIM, 96, __VA_ARGS__)       \
    STRATA_HEAD_DIM_CASE(HEAD_DIM, 128, __VA_ARGS__)      \
    STRATA_HEAD_DIM_CASE(HEAD_DIM, 256, __VA_ARGS__)      \
    default:                                              \
      break;                                              \
  }

// Query heads one attention block handles for its KV head: 1 to 8 (Llama 3 and Mistral 4;
// Qwen2.5 5, 6 and 7). The decode kernel merges its lane groups' per-head state in static
// shared memory, which bounds this at 8 for head_dim 128. A larger GQA group (up to
// kMaxGqaGroupSize query heads per KV head) runs as several blocks per KV head, each on a
// subgroup of GqaSubgroupSize(group) heads (the general path: each block reads the KV head).
#define STRATA_GQA_CASE(GROUP_SIZE, N, ...)         \
  case N: {                                         \
    [[maybe_unused]] constexpr int GROUP_SIZE = N;  \
    __VA_ARGS__                                     \
  } break;
#define STRATA_DISPATCH_GQA_GROUP_SIZE(group_size, GROUP_SIZE, ...) \
  switch (group_size) {                                             \
    STRATA_GQA_CASE(GROUP_SIZE, 1, __VA_ARGS__)                     \
    STRATA_GQA_CASE(GROUP_SIZE, 2, __VA_ARGS__)                     \
    STRATA_GQA_CASE(GROUP_SIZE, 3, __VA_ARGS__)                     \
    STRATA_GQA_CASE(GROUP_SIZE, 4, __VA_ARGS__)                     \
    STRATA_GQA_CASE(GROUP_SIZE, 5, __VA_ARGS__)                     \
    STRATA_GQA_CASE(GROUP_SIZE, 6, __VA_ARGS__)                     \
    STRATA_GQA_CASE(GROUP_SIZE, 7, __VA_ARGS__)                     \
    STRATA_GQA_CASE(GROUP_SIZE, 8, __VA_ARGS__)                     \
    default:                                                        \
      break;                                                        \
  }

namespace strata::kernels {

// True when STRATA_DISPATCH_HEAD_DIM compiles a kernel for head_dim.
constexpr bool IsDispatchedHeadDim(int head_dim) {
  STRATA_DISPATCH_HEAD_DIM(head_dim, kHeadDim, { return true; })
  return false;
}

// The head dims STRATA_DISPATCH_HEAD_DIM takes, as a list (for tables kept per head dim).
inline constexpr int kDispatchedHeadDims[] = {64, 80, 96, 128, 256};

// head_dim's index in kDispatchedHeadDims, or -1.
constexpr int DispatchedHeadDimIndex(int head_dim) {
  for (int i = 0; i < static_cast<int>(sizeof(kDispatchedHeadDims) / sizeof(int)); ++i) {
    if (kDispatchedHeadDims[i] == head_dim) return i;
  }
  return -1;
}

inline constexpr int kMaxGqaGroupSize = 64;

// The query heads one block of a GQA group handles: the group itself up to 8, else its
// largest divisor within 8 (16: 8, 12: 6, 10: 5, 9: 3; a prime such as 11: 1). 0 for a
// group outside 1..kMaxGqaGroupSize.
constexpr int GqaSubgroupSize(int group_size) {
  if (group_size < 1 || group_size > kMaxGqaGroupSize) return 0;
  for (int s = group_size < 8 ? group_size : 8; s > 1; --s) {
    if (group_size % s == 0) return s;
  }
  return 1;
}

// True when the attention kernels run GQA groups of group_size (through subgroups of
// GqaSubgroupSize, which STRATA_DISPATCH_GQA_GROUP_SIZE compiles).
constexpr bool IsDispatchedGqaGroupSize(int group_size) {
  const int subgroup = GqaSubgroupSize(group_size);
  STRATA_DISPATCH_GQA_GROUP_SIZE(subgroup, kGroup, { return true; })
  return false;
}

static_assert(GqaSubgroupSize(4) == 4 && GqaSubgroupSize(16) == 8 && GqaSubgroupSize(12) == 6 &&
              GqaSubgroupSize(9) == 3 && GqaSubgroupSize(11) == 1 && GqaSubgroupSize(0) == 0 &&
              GqaSubgroupSize(65) == 0);
static_assert(IsDispatchedHeadDim(80) && IsDispatchedHeadDim(256) && !IsDispatchedHeadDim(32) &&
              !IsDispatchedHeadDim(192));
static_assert([] {  // the list and the macro name the same head dims
  for (int d = 0; d <= 512; ++d) {
    if (IsDispatchedHeadDim(d) != (DispatchedHeadDimIndex(d) >= 0)) return false;
  }
  return true;
}());
static_assert(IsDispatchedGqaGroupSize(16) && IsDispatchedGqaGroupSize(13) && !IsDispatchedGqaGroupSize(0));

// Query heads per KV head: num_heads / kv_heads when kv_heads > 0 divides num_heads,
// otherwise 0 (which no kernel is compiled for).
constexpr int GqaGroupSize(int num_heads, int kv_heads) {
  return kv_heads > 0 && num_heads % kv_heads == 0 ? num_heads / kv_heads : 0;
}

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_DISPATCH_H_
