// Helpers for device tests: a fixture that skips (and says why) without a GPU, device
// copies of host vectors, and random inputs.
#ifndef STRATA_KERNELS_TESTING_CUDA_TESTING_H_
#define STRATA_KERNELS_TESTING_CUDA_TESTING_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace strata::kernels::test_support {

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// A device copy of a host vector; frees itself.
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr_), Bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), Bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceVector() { cudaFree(ptr_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;

  T* get() { return ptr_; }
  size_t size() const { return size_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, Bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  size_t Bytes() const { return std::max<size_t>(size_, 1) * sizeof(T); }
  size_t size_;
  T* ptr_ = nullptr;
};

// Skips every test of the suite, saying why, when no CUDA device is visible.
class GpuTest : public testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device ("
                   << (error != cudaSuccess ? cudaGetErrorString(error) : "device count is 0")
                   << "): GPU tests skipped";
    }
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  void Sync() { ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess); }

  cudaStream_t stream_ = nullptr;
};

}  // namespace strata::kernels::test_support

#endif  // STRATA_KERNELS_TESTING_CUDA_TESTING_H_
