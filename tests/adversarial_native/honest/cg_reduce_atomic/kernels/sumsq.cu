// Honest: sum of squares with cooperative_groups (tiled_partition<32>, cg::reduce with cg::plus), a
// persistent grid sized from cudaOccupancyMaxActiveBlocksPerMultiprocessor and the SM count (both
// queried every call), one atomicAdd per warp into an output the launcher zeroes with cudaMemsetAsync
// on its stream, and an __activemask() warp sum for the ragged tail.
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cstdint>

namespace cg = cooperative_groups;

constexpr int kThreads = 256;

__device__ __forceinline__ float active_sum(float v) {
  const unsigned mask = __activemask();
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o);
  return v;
}

__global__ void __launch_bounds__(kThreads) sumsq_kernel(const float* __restrict__ x, float* __restrict__ out,
                                                         int64_t n) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  const int64_t full = n / 32 * 32;  // whole warps; the tail below
  float acc = 0.f;
  for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < full; i += stride) {
    const float v = __ldg(x + i);
    acc = fmaf(v, v, acc);
  }
  const float total = cg::reduce(warp, acc, cg::plus<float>());
  if (warp.thread_rank() == 0) atomicAdd(out, total);
  if (blockIdx.x == 0 && threadIdx.x < n - full) {
    const float v = x[full + threadIdx.x];
    const float t = active_sum(v * v);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, t);
  }
}

extern "C" cudaError_t sum_of_squares(const float* x, float* out, int64_t n, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), stream);
  if (err != cudaSuccess || n <= 0) return err;
  int device = 0, sms = 0, per_sm = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sumsq_kernel, kThreads, 0);
  int64_t blocks = (int64_t)(sms > 0 ? sms : 1) * (per_sm > 0 ? per_sm : 1);
  const int64_t needed = (n + kThreads - 1) / kThreads;
  if (blocks > needed) blocks = needed > 0 ? needed : 1;
  sumsq_kernel<<<(unsigned)blocks, kThreads, 0, stream>>>(x, out, n);
  return cudaGetLastError();
}
