// Honest: reductions in plain (non-static, non-inline) __device__ and __host__ __device__ helpers,
// the way most hand-written kernels are laid out. nvcc gives each __device__ one a host body that
// calls exit(1), so the object imports exit (seen on KernelBench's LayerNorm, issue 13).
#include <cuda_runtime.h>
#include <cstdint>

__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ float block_sum(float v, float* red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) v += red[w];
    __syncthreads();
    return v;
}

__host__ __device__ int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__global__ void row_mean(const float* x, float* y, int64_t cols) {
    __shared__ float red[32];
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += x[blockIdx.x * cols + c];
    s = block_sum(s, red);
    if (threadIdx.x == 0) y[blockIdx.x] = s / (float)cols;
}

extern "C" void row_means(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0 || ceil_div(cols, 1) <= 0) return;
    row_mean<<<(unsigned)rows, 256, 0, stream>>>(x, y, cols);
}
