// Honest: CUTLASS-style qualifier macros (DEVICE_INLINE for __device__ __forceinline__) on small PTX
// helpers: a read-only load and the lane id; a grid-stride axpby.
#include <cuda_runtime.h>
#include <cstdint>

#define DEVICE_INLINE __device__ __forceinline__
#define HOST_DEVICE __host__ __device__

DEVICE_INLINE float ld_ro(const float* p) {
  float v;
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

DEVICE_INLINE unsigned lane_id() {
  unsigned lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}

HOST_DEVICE constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__global__ void axpby_kernel(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
                             int64_t n, float a, float b) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = a * ld_ro(x + i) + b * ld_ro(y + i);
  }
  (void)lane_id();
}

extern "C" int axpby(const float* x, const float* y, float* out, int64_t n, float a, float b, cudaStream_t stream) {
  if (n <= 0) return 0;
  const int64_t blocks = ceil_div(n, 256);
  axpby_kernel<<<(unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8), 256, 0, stream>>>(x, y, out, n, a, b);
  return (int)cudaGetLastError();
}
