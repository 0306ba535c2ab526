// y = max(x, 0), grid-strided over n elements.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = fmaxf(x[i], 0.f);
}

extern "C" void relu_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    relu_kernel<<<4096, 256, 0, stream>>>(x, y, n);
}
