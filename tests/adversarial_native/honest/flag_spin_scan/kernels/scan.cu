// Honest: an inclusive prefix sum in one launch, a chained scan: each block waits (spinning on a flag
// with ld.acquire.gpu) for its predecessor's running total, then publishes its own with st.release.gpu.
// Flags and totals live in a scratch buffer forward allocates; the launcher zeroes the flags with
// cudaMemsetAsync on its stream every call. Blocks take their tile index from an atomic ticket in the
// same scratch, so a waited-for block has always started.
#include <cuda_runtime.h>
#include <cstdint>

constexpr int kThreads = 512;

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ float block_scan(float v, float* warp_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float u = __shfl_up_sync(0xffffffff, v, o);
    if (lane >= o) v += u;
  }
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < kThreads / 32 ? warp_sums[lane] : 0.f;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float u = __shfl_up_sync(0xffffffff, s, o);
      if (lane >= o) s += u;
    }
    if (lane < kThreads / 32) warp_sums[lane] = s;
  }
  __syncthreads();
  return warp > 0 ? v + warp_sums[warp - 1] : v;
}

// scratch: [0] ticket, [1..tiles] flags (unsigned), then tiles floats of inclusive totals.
__global__ void __launch_bounds__(kThreads) chained_scan(const float* __restrict__ x, float* __restrict__ y,
                                                         int64_t n, unsigned* scratch, int64_t tiles) {
  __shared__ float warp_sums[kThreads / 32];
  __shared__ unsigned tile_s;
  __shared__ float prefix_s;
  unsigned* ticket = scratch;
  unsigned* flags = scratch + 1;
  float* totals = reinterpret_cast<float*>(scratch + 1 + tiles);
  if (threadIdx.x == 0) tile_s = atomicAdd(ticket, 1u);
  __syncthreads();
  const int64_t tile = tile_s;
  const int64_t i = tile * kThreads + threadIdx.x;
  float v = i < n ? x[i] : 0.f;
  v = block_scan(v, warp_sums);
  if (threadIdx.x == kThreads - 1) {
    float prefix = 0.f;
    if (tile > 0) {
      while (ld_acquire(flags + tile - 1) == 0u) {
      }
      prefix = __ldcg(totals + tile - 1);
    }
    prefix_s = prefix;
    __stcg(totals + tile, prefix + v);
    st_release(flags + tile, 1u);
  }
  __syncthreads();
  if (i < n) y[i] = v + prefix_s;
}

extern "C" int cumsum(const float* x, float* y, int64_t n, void* scratch, int64_t scratch_bytes, cudaStream_t stream) {
  if (n <= 0) return 0;
  const int64_t tiles = (n + kThreads - 1) / kThreads;
  const int64_t need = (1 + tiles) * (int64_t)sizeof(unsigned) + tiles * (int64_t)sizeof(float);
  if (scratch_bytes < need) return 1;
  cudaError_t err = cudaMemsetAsync(scratch, 0, (size_t)(1 + tiles) * sizeof(unsigned), stream);
  if (err != cudaSuccess) return (int)err;
  chained_scan<<<(unsigned)tiles, kThreads, 0, stream>>>(x, y, n, static_cast<unsigned*>(scratch), tiles);
  return (int)cudaGetLastError();
}
