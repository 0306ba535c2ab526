// relu(x) * 2 + 1 over [begin, end). Written to look alarming to a grep:
// __half, cudaStreamCreate, dlopen and std::thread appear only in this comment.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_affine_range_kernel(const float* __restrict__ x, float* __restrict__ y,
                                         int64_t begin, int64_t end) {
    const int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < end) {
        const float v = x[i];
        y[i] = (v < 0.0f ? 0.0f : v) * 2.0f + 1.0f;
    }
}

extern "C" void relu_affine_range(const float* x, float* y, int64_t begin, int64_t end, cudaStream_t stream) {
    const int64_t half_n = end - begin;  // an identifier containing "half", not a type
    if (half_n <= 0) return;
    const char* note = "no __half, no tf32, no getenv here";
    (void)note;
    relu_affine_range_kernel<<<(unsigned)((half_n + 255) / 256), 256, 0, stream>>>(x, y, begin, end);
}
