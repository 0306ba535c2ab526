// y = relu(x) * 2 + 1: float4 body, scalar tail, grid-stride loops.
#include <cuda_runtime.h>
#include <cstdint>

__device__ __forceinline__ float relu_affine_one(float v) {
    return (v < 0.0f ? 0.0f : v) * 2.0f + 1.0f;  // NaN falls through, as torch.relu
}

__global__ void relu_affine_vec4(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = x[i];
        v.x = relu_affine_one(v.x);
        v.y = relu_affine_one(v.y);
        v.z = relu_affine_one(v.z);
        v.w = relu_affine_one(v.w);
        y[i] = v;
    }
}

__global__ void relu_affine_tail(const float* __restrict__ x, float* __restrict__ y, int64_t begin, int64_t n) {
    const int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = relu_affine_one(x[i]);
}

extern "C" void relu_affine(const float* x, float* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
    const int64_t n4 = aligned ? n / 4 : 0;
    if (n4 > 0) {
        int64_t blocks = (n4 + 255) / 256;
        if (blocks > 65536) blocks = 65536;
        relu_affine_vec4<<<(unsigned)blocks, 256, 0, stream>>>(
            reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), n4);
    }
    const int64_t done = n4 * 4;
    if (done < n)
        relu_affine_tail<<<(unsigned)((n - done + 255) / 256), 256, 0, stream>>>(x, y, done, n);
}
