// Load-time code: a constructor runs when the library is loaded, before any guard looks.
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>

__attribute__((constructor)) static void at_load() { puts("patched"); }

__global__ void scale_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.f * x[i];
}

extern "C" void scale(const float* x, float* y, int64_t n, cudaStream_t stream) {
  scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
