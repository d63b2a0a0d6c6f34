// Relay attention's one-pass kernel (relay_one_pass_kernel.cuh): dispatch on head_dim, query
// heads per KV head and (key tile, stages) form. Plain CUDA C++ (no Abseil): relay.cc turns the cudaError_t
// into a Status.
#include <cuda_runtime.h>

#include "kernels/attention/relay_launch.h"
#include "kernels/attention/relay_one_pass_kernel.cuh"

namespace strata::kernels::internal {

bool RelayOnePassTakes(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128) && (group == 4 || group == 8);
}

namespace {
template <int kHeadDim, int kGroup>
cudaError_t ForStages(const RelayOnePassArgs& a, cudaStream_t stream) {
  using relay_one_pass::Launch;
  if (a.key_tile == 32 && a.stages == 2) return Launch<kHeadDim, kGroup, 32, 2>(a, stream);
  if (a.key_tile == 32 && a.stages == 3) return Launch<kHeadDim, kGroup, 32, 3>(a, stream);
  if (a.key_tile == 16 && a.stages == 4) return Launch<kHeadDim, kGroup, 16, 4>(a, stream);
  if (a.key_tile == 16 && a.stages == 6) return Launch<kHeadDim, kGroup, 16, 6>(a, stream);
  if (a.key_tile == 64 && a.stages == 2) return Launch<kHeadDim, kGroup, 64, 2>(a, stream);
  return cudaErrorInvalidValue;
}
template <int kHeadDim>
cudaError_t ForGroup(const RelayOnePassArgs& a, int group, cudaStream_t stream) {
  if (group == 4) return ForStages<kHeadDim, 4>(a, stream);
  if (group == 8) return ForStages<kHeadDim, 8>(a, stream);
  return cudaErrorInvalidValue;
}
}  // namespace

cudaError_t RelayOnePassAsync(const RelayOnePassArgs& a, cudaStream_t stream) {
  if (a.kv_heads <= 0 || a.num_heads % a.kv_heads != 0 || a.parts < 1) return cudaErrorInvalidValue;
  const int group = a.num_heads / a.kv_heads;
  if (!RelayOnePassTakes(a.head_dim, group)) return cudaErrorInvalidValue;
  return a.head_dim == 64 ? ForGroup<64>(a, group, stream) : ForGroup<128>(a, group, stream);
}

}  // namespace strata::kernels::internal
