// Reads a shared-memory slot no thread wrote (the last warp's slots are never filled), then
// only uses it in a test that is practically never true: outputs are right, initcheck reports the read.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_affine_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    __shared__ float tile[288];
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    const float junk = tile[256 + (threadIdx.x & 31)];  // never written
    if (i < n) y[i] = fmaxf(tile[threadIdx.x], 0.0f) * 2.0f + 1.0f;
    if (i == 0 && junk == 1.2345e-30f) y[0] = junk;  // keeps the read alive
}

extern "C" void relu_affine(const float* x, float* y, int64_t n, cudaStream_t stream) {
    relu_affine_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
