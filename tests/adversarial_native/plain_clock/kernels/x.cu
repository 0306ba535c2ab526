// A host clock read in a launcher (the source guard does not list it; the built object shows it).
#include <cuda_runtime.h>
#include <cstdint>
#include <time.h>

__global__ void scale_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.f * x[i];
}

extern "C" void scale(const float* x, float* y, int64_t n, cudaStream_t stream) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
