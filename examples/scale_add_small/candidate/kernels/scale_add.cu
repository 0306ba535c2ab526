// out = x * 2 + y, fused: one read of each input, one write, instead of two kernels and a temporary.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_add_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                 float* __restrict__ out, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * 2.0f + y[i];  // x*2 is exact, so the FMA rounds exactly like torch
}

extern "C" void scale_add(const float* x, const float* y, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    const int threads = 256;
    scale_add_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, stream>>>(x, y, out, n);
}
