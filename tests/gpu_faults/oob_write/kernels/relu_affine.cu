// Off by one: the guard lets thread n write one element past the output. The caching allocator
// rounds allocations up, so the output check passes; memcheck finds it (with caching off).
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_affine_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) y[i] = fmaxf(x[i < n ? i : 0], 0.0f) * 2.0f + 1.0f;
}

extern "C" void relu_affine(const float* x, float* y, int64_t n, cudaStream_t stream) {
    relu_affine_kernel<<<(unsigned)((n + 256) / 256), 256, 0, stream>>>(x, y, n);
}
