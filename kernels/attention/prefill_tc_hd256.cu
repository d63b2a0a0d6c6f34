// The tensor-core prefill kernels of head_dim 256 (prefill_tc_kernel.cuh),
// and relay attention's fused kernel of the same head dims (relay_kernel.cuh).
#include "kernels/attention/prefill_tc_kernel.cuh"
#include "kernels/attention/relay_kernel.cuh"

namespace strata::kernels::internal {

STRATA_PREFILL_TC_HEAD_DIM(, 256)
template cudaError_t RelayFusedForHeadDim<256>(const RelayFusedArgs&, cudaStream_t);

}  // namespace strata::kernels::internal
