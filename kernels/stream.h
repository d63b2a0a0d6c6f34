// cudaStream_t for the public kernels headers: the CUDA runtime's type when strata is built
// with CUDA (STRATA_WITH_CUDA), an opaque pointer of the same name otherwise, so callers can
// name streams whether or not CUDA is present (every Launch* then returns Unimplemented).
#ifndef STRATA_KERNELS_STREAM_H_
#define STRATA_KERNELS_STREAM_H_

#if defined(STRATA_WITH_CUDA)
#include <cuda_runtime_api.h>
#else
typedef struct CUstream_st* cudaStream_t;
#endif

#endif  // STRATA_KERNELS_STREAM_H_
