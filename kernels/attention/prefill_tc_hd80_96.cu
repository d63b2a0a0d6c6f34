// The tensor-core prefill kernels of head_dim 80 and 96 (prefill_tc_kernel.cuh).
#include "kernels/attention/prefill_tc_kernel.cuh"

namespace strata::kernels::internal {

STRATA_PREFILL_TC_HEAD_DIM(, 80)
STRATA_PREFILL_TC_HEAD_DIM(, 96)

}  // namespace strata::kernels::internal
