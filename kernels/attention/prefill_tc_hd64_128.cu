// The tensor-core prefill kernels of head_dim 64 and 128 (prefill_tc_kernel.cuh),
// and relay attention's fused kernel of the same head dims (relay_kernel.cuh).
#include "kernels/attention/prefill_tc_kernel.cuh"
#include "kernels/attention/relay_kernel.cuh"

namespace strata::kernels::internal {

STRATA_PREFILL_TC_HEAD_DIM(, 64)
STRATA_PREFILL_TC_HEAD_DIM(, 128)
template cudaError_t RelayFusedForHeadDim<64>(const RelayFusedArgs&, cudaStream_t);
template cudaError_t RelayFusedForHeadDim<128>(const RelayFusedArgs&, cudaStream_t);

}  // namespace strata::kernels::internal
