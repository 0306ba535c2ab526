// Honest: a compiler barrier (an asm with no instructions, clobbering memory) in host loops, in
// both spellings; it emits no code and only stops g++ reordering the stores around it.
#include <cuda_runtime.h>
#include <cstdint>

struct Coeffs {
  float c[4];
};

__global__ void poly_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, Coeffs k) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    y[i] = ((k.c[3] * v + k.c[2]) * v + k.c[1]) * v + k.c[0];
  }
}

extern "C" int poly(const float* x, float* y, int64_t n, float a, cudaStream_t stream) {
  Coeffs k;
  float p = 1.f;
  for (int i = 0; i < 4; ++i) {
    k.c[i] = p;
    p *= a;
    asm volatile("" ::: "memory");
  }
  for (int i = 0; i < 4; ++i) {
    k.c[i] = k.c[i] / (float)(i + 1);
    __asm__ __volatile__("":::"memory");
  }
  if (n <= 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 65535) blocks = 65535;
  poly_kernel<<<(unsigned)blocks, 256, 0, stream>>>(x, y, n, k);
  return (int)cudaGetLastError();
}
