// Softmax over each row: one block per row, three passes (max, sum of exp, write).
#include <cuda_runtime.h>
#include <cstdint>

constexpr int kThreads = 512;

template <bool kMax>
__device__ float block_reduce(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, v, o);
        v = kMax ? fmaxf(v, other) : v + other;
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < kThreads / 32; ++w) v = kMax ? fmaxf(v, red[w]) : v + red[w];
    __syncthreads();
    return v;
}

__global__ void __launch_bounds__(kThreads)
softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float red[kThreads / 32];
    const float* xr = x + blockIdx.x * cols;
    float* yr = y + blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += kThreads) m = fmaxf(m, xr[i]);
    m = block_reduce<true>(m, red);
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < cols; i += kThreads) s += __expf(xr[i] - m);
    const float inv = 1.f / block_reduce<false>(s, red);
    for (int64_t i = threadIdx.x; i < cols; i += kThreads) yr[i] = __expf(xr[i] - m) * inv;
}

extern "C" void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return;
    softmax_kernel<<<(unsigned)rows, kThreads, 0, stream>>>(x, y, cols);
}
