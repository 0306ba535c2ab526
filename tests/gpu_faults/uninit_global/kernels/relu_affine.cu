// The first warp reads its output elements before writing them (the output comes from
// torch.empty_like: nothing wrote it), then only uses the value in a test that is practically
// never true: outputs are right, initcheck reports the reads. The usual shape of this bug is an
// accumulator in global memory read-modify-written without being zeroed first. (Reading every
// element makes initcheck track 4M errors: over 5 minutes on an H200.)
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_affine_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float before = i < 32 ? y[i] : 0.0f;  // never written
    y[i] = fmaxf(x[i], 0.0f) * 2.0f + 1.0f;
    if (before == 1.2345e-30f) y[i] = before;  // keeps the read alive
}

extern "C" void relu_affine(const float* x, float* y, int64_t n, cudaStream_t stream) {
    relu_affine_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
