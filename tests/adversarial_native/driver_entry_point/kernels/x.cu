// The CUDA runtime's own dlsym: fetches any driver function by name (module loading included).
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.f * x[i];
}

extern "C" void scale(const float* x, float* y, int64_t n, cudaStream_t stream) {
  void* fn = nullptr;
  cudaGetDriverEntryPoint("cuModuleLoadData", &fn, cudaEnableDefault, nullptr);
  scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
