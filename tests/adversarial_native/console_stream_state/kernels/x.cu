// Hostile: 64 bits kept between calls in std::clog's precision field (an inline setter: no symbol
// but the stream itself), so no writable static appears in the object.
#include <cuda_runtime.h>
#include <cstdint>
#include <iostream>

__global__ void scale_kernel(float* x, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.f;
}

extern "C" int scale(float* x, int64_t n, cudaStream_t stream) {
  const std::streamsize last = std::clog.precision((std::streamsize)(intptr_t)x);
  if (last == (std::streamsize)(intptr_t)x) return 0;
  scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, n);
  return (int)cudaGetLastError();
}
