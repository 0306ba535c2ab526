// Writable data with no symbol, made by file-scope assembly: state no name reveals.
#include <cuda_runtime.h>
#include <cstdint>

asm(".pushsection .data\n\t.zero 64\n\t.popsection");

__global__ void scale_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.f * x[i];
}

extern "C" void scale(const float* x, float* y, int64_t n, cudaStream_t stream) {
  scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
