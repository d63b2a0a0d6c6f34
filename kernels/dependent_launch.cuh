// Programmatic dependent launch (Hopper's PDL; plain CUDA C++ for the .cu files): a kernel
// launched as a programmatic dependent of the stream's previous kernel may start once every
// block of that kernel has called AllowDependentLaunch (or exited), on the SMs they leave,
// instead of after the whole kernel. The stream still orders everything else: the kernels
// launched after the dependent, ordinarily, start after both have finished.
//
// A dependent launched this way must not read what the kernel before it writes (strata's
// dependents never call griddepcontrol.wait): relay attention's decode of the rows' own
// tokens behind its system part, which reads other memory. On a device without PDL
// (compute capability below 9.0) the launch is an ordinary one; so is a kernel that never
// calls AllowDependentLaunch, for the dependent waits until it exits.
#ifndef STRATA_KERNELS_DEPENDENT_LAUNCH_CUH_
#define STRATA_KERNELS_DEPENDENT_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <cstddef>

namespace strata::kernels::internal {

// Lets the stream's next kernel start, where it was launched as a programmatic dependent;
// nothing otherwise. Every block calls it once, at its start for the most overlap.
__device__ __forceinline__ void AllowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent of the
// stream's previous kernel when `dependent` is set. Returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         bool dependent, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  if (dependent) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, static_cast<Args&&>(args)...);
}

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_DEPENDENT_LAUNCH_CUH_
