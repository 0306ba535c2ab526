// Writes 4 TiB past the output: an illegal address that poisons the CUDA context. (A plain
// nullptr store is undefined behaviour that nvcc -O3 deletes, so the kernel would silently do
// nothing; the volatile offset keeps the store.)
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_affine_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    volatile int64_t far = int64_t(1) << 40;
    float* nowhere = y + far;
    if (i < n) nowhere[i] = fmaxf(x[i], 0.0f) * 2.0f + 1.0f;
}

extern "C" void relu_affine(const float* x, float* y, int64_t n, cudaStream_t stream) {
    relu_affine_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
