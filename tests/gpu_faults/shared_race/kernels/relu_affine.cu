// Stages a tile in shared memory and reads a neighbour's slot without __syncthreads(): a race
// that usually reads the right value on today's scheduling. racecheck finds it.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_affine_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    __shared__ float tile[256];
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    // missing __syncthreads(): thread t reads what thread (t ^ 32) wrote
    const float v = tile[threadIdx.x ^ 32];
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + (threadIdx.x ^ 32);
    if (j < n) y[j] = fmaxf(v, 0.0f) * 2.0f + 1.0f;
}

extern "C" void relu_affine(const float* x, float* y, int64_t n, cudaStream_t stream) {
    relu_affine_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
