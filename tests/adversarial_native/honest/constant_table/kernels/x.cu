// Honest: coefficients in __constant__ memory (read-only on the device), uploaded on every call,
// and a host-side table that is `static const` (read-only data, no state).
#include <cuda_runtime.h>
#include <cstdint>

__constant__ float coeffs[16];
namespace poly { __constant__ int degree[1]; }
static const float kHostCoeffs[16] = {1.f, 0.5f, 0.25f, 0.125f};

__global__ void poly_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.f, p = 1.f;
  for (int d = 0; d < poly::degree[0]; ++d) { acc += coeffs[d] * p; p *= x[i]; }
  y[i] = acc;
}

extern "C" int poly_eval(const float* x, float* y, int64_t n, cudaStream_t stream) {
  const int degree = 4;
  cudaMemcpyToSymbolAsync(coeffs, kHostCoeffs, sizeof(kHostCoeffs), 0, cudaMemcpyHostToDevice, stream);
  cudaMemcpyToSymbolAsync(poly::degree, &degree, sizeof(int), 0, cudaMemcpyHostToDevice, stream);
  poly_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
  return (int)cudaGetLastError();
}
