// RMSNorm over dim 1 of a (batch, features, inner) tensor: one thread per (batch, inner) position,
// reading its `features` values at stride `inner` (coalesced across the threads of a warp).
#include <cuda_runtime.h>
#include <cstdint>

__global__ void rmsnorm_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t batch,
                               int64_t features, int64_t inner, float eps) {
    const int64_t n = batch * inner;
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < n; p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = p / inner, i = p % inner;
        const float* xp = x + b * features * inner + i;
        float* yp = y + b * features * inner + i;
        float s = 0.f;
        for (int64_t f = 0; f < features; ++f) s += xp[f * inner] * xp[f * inner];
        const float inv = 1.f / sqrtf(s / (float)features + eps);
        for (int64_t f = 0; f < features; ++f) yp[f * inner] = xp[f * inner] * inv;
    }
}

extern "C" void rmsnorm_features(const float* x, float* y, int64_t batch, int64_t features, int64_t inner,
                                 float eps, cudaStream_t stream) {
    if (batch <= 0 || features <= 0 || inner <= 0) return;
    rmsnorm_kernel<<<4096, 256, 0, stream>>>(x, y, batch, features, inner, eps);
}
