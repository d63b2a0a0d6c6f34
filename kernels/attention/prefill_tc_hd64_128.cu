// The tensor-core prefill kernels of head_dim 64 and 128 (prefill_tc_kernel.cuh).
#include "kernels/attention/prefill_tc_kernel.cuh"

namespace strata::kernels::internal {

STRATA_PREFILL_TC_HEAD_DIM(, 64)
STRATA_PREFILL_TC_HEAD_DIM(, 128)

}  // namespace strata::kernels::internal
