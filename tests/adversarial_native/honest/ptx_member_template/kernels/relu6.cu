// Honest: inline PTX in the other places device code lives: a __device__ member function of a
// functor struct, a template __global__ kernel, and a __host__ __device__ helper whose PTX is guarded by
// `#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800` (a portable fallback otherwise).
#include <cuda_runtime.h>
#include <cstdint>

struct StreamingLoad {
  __device__ __forceinline__ float operator()(const float* p) const {
    float v;
    asm volatile("ld.global.nc.L1::no_allocate.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
  }
};

__host__ __device__ __forceinline__ float clamp6(float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.f32 %0, %1, 0f00000000;\n\tmin.f32 %0, %0, 0f40C00000;" : "=f"(r) : "f"(v));
  return v != v ? v : r;  // NaN stays NaN, as torch.nn.functional.relu6
#else
  return v != v ? v : (v < 0.f ? 0.f : (v > 6.f ? 6.f : v));
#endif
}

template <typename Load, int kThreads>
__global__ void __launch_bounds__(kThreads) relu6_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  unsigned warp_id;
  asm("mov.u32 %0, %%warpid;" : "=r"(warp_id));
  if (i < n) y[i] = clamp6(Load()(x + i));
}

extern "C" int relu6(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return 0;
  relu6_kernel<StreamingLoad, 256><<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
  return (int)cudaGetLastError();
}
