// Honest: torch.bucketize(x, boundaries) (right=False): a binary search per element whose midpoint is
// the integer halving add __hadd(lo, hi) (CUDA's int intrinsic: (lo + hi) >> 1 without overflow).
#include <cuda_runtime.h>
#include <cstdint>

__global__ void bucketize_kernel(const float* __restrict__ x, const float* __restrict__ bounds, int nb,
                                 int64_t* __restrict__ out, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  int lo = 0, hi = nb;  // first index with bounds[idx] >= v
  while (lo < hi) {
    const int mid = __hadd(lo, hi);
    if (bounds[mid] < v) lo = mid + 1; else hi = mid;
  }
  out[i] = lo;
}

extern "C" int bucketize(const float* x, const float* bounds, int nb, int64_t* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return 0;
  bucketize_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, bounds, nb, out, n);
  return (int)cudaGetLastError();
}
