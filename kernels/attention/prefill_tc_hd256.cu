// The tensor-core prefill kernels of head_dim 256 (prefill_tc_kernel.cuh).
#include "kernels/attention/prefill_tc_kernel.cuh"

namespace strata::kernels::internal {

STRATA_PREFILL_TC_HEAD_DIM(, 256)

}  // namespace strata::kernels::internal
