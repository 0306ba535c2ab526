// Load-time code: a global object with init_priority, run before the others.
#include <cuda_runtime.h>
#include <cstdint>

int first_touch();
struct Early { int v; Early() : v(first_touch()) {} };
Early early __attribute__((init_priority(101)));
int first_touch() { return 7; }

__global__ void scale_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.f * x[i];
}

extern "C" void scale(const float* x, float* y, int64_t n, cudaStream_t stream) {
  scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
