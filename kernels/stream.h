// cudaStream_t and cudaEvent_t for the public kernels headers: the CUDA runtime's types when
// strata is built with CUDA (STRATA_WITH_CUDA), opaque pointers of the same names otherwise,
// so callers can name streams and events whether or not CUDA is present (every Launch* then
// returns Unimplemented).
#ifndef STRATA_KERNELS_STREAM_H_
#define STRATA_KERNELS_STREAM_H_

#if defined(STRATA_WITH_CUDA)
#include <cuda_runtime_api.h>
#else
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
#endif

#endif  // STRATA_KERNELS_STREAM_H_
