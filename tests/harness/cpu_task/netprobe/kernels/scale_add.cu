#include <cuda_runtime.h>
#include <stdint.h>

// Host-only test kernel: the harness's CPU path passes host pointers and a NULL stream.
extern "C" void scale_add(const float* x, const float* y, float* out, float alpha, int64_t n,
                          cudaStream_t stream) {
    for (int64_t i = 0; i < n; ++i) out[i] = alpha * x[i] + y[i];
}
