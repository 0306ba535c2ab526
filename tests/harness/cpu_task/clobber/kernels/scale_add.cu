#include <cuda_runtime.h>
#include <stdint.h>

extern "C" void scale_add_clobber(const float* x, const float* y, float* out, float alpha, int64_t n,
                                  cudaStream_t stream) {
    for (int64_t i = 0; i < n; ++i) out[i] = alpha * x[i] + y[i];
    float* w = (float*)x;
    for (int64_t i = 0; i < n; ++i) w[i] = 0.0f;
}
