// Hostile: the CPU's time-stamp counter read in host code through the compiler's intrinsic: no asm
// statement and no import, so only the object's own instructions show it (a clock of its own).
#include <cuda_runtime.h>
#include <x86intrin.h>
#include <cstdint>

__global__ void scale_kernel(float* x, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.f;
}

extern "C" int scale(float* x, int64_t n, cudaStream_t stream) {
  const unsigned long long t0 = __rdtsc();
  scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, n);
  return (int)cudaGetLastError() + (int)((__rdtsc() - t0) >> 62);
}
