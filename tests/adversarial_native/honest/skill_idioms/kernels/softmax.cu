// Honest: what SKILL.md recommends, written the usual way: a checked-call macro, constexpr launch
// constants, a row-wise softmax with one block per row and warp-shuffle reductions, 16-byte loads
// when every pointer and row start is aligned (a scalar path otherwise), more than 48 KB of dynamic
// shared memory opted into with cudaFuncSetAttribute, a template kernel, a bounded grid-stride loop
// from a static helper, and every launch on the launcher's stream.
#include <cuda_runtime.h>
#include <cfloat>
#include <cstdint>
#include <cstdio>

#define CUDA_CHECK(call)                                                                       \
  do {                                                                                         \
    cudaError_t err_ = (call);                                                                 \
    if (err_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_));            \
      return err_;                                                                             \
    }                                                                                          \
  } while (0)

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = 1 << 16;

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

// One partial per warp in shared memory, then one more warp reduction.
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
  v = kMax ? warp_max(v) : warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kWarps ? scratch[lane] : (kMax ? -FLT_MAX : 0.f);
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();
  return v;
}

// The row is staged in dynamic shared memory (cols floats), read from HBM once.
template <bool kVec4>
__global__ void __launch_bounds__(kThreads) softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                                          int64_t cols) {
  extern __shared__ float row[];
  __shared__ float scratch[kWarps];
  const float* src = x + blockIdx.x * cols;
  float* dst = y + blockIdx.x * cols;
  float m = -FLT_MAX;
  if (kVec4) {
    for (int64_t i = threadIdx.x; i < cols / 4; i += kThreads) {
      const float4 v = reinterpret_cast<const float4*>(src)[i];
      reinterpret_cast<float4*>(row)[i] = v;
      m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    }
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
      row[i] = src[i];
      m = fmaxf(m, row[i]);
    }
  }
  __syncthreads();
  m = block_reduce<true>(m, scratch);
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const float e = expf(row[i] - m);
    row[i] = e;
    s += e;
  }
  s = block_reduce<false>(s, scratch);
  const float inv = 1.f / s;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) dst[i] = row[i] * inv;
}

__global__ void scale_kernel(float* __restrict__ y, int64_t n, float a) {
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) y[i] *= a;
}

static unsigned blocks_for(int64_t work) {
  const int64_t b = (work + kThreads - 1) / kThreads;
  return (unsigned)(b < kMaxBlocks ? b : kMaxBlocks);
}

extern "C" cudaError_t softmax(const float* x, float* y, int64_t rows, int64_t cols, float scale,
                               cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const size_t smem = (size_t)cols * sizeof(float);
  if (smem > 227 * 1024) return cudaErrorInvalidValue;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y);
  const bool vec4 = (addr & 15) == 0 && cols % 4 == 0;
  if (smem > 48 * 1024) {
    CUDA_CHECK(cudaFuncSetAttribute(softmax_rows<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CUDA_CHECK(cudaFuncSetAttribute(softmax_rows<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  }
  if (vec4)
    softmax_rows<true><<<(unsigned)rows, kThreads, smem, stream>>>(x, y, cols);
  else
    softmax_rows<false><<<(unsigned)rows, kThreads, smem, stream>>>(x, y, cols);
  CUDA_CHECK(cudaGetLastError());
  if (scale != 1.f) scale_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(y, rows * cols, scale);
  return cudaGetLastError();
}
