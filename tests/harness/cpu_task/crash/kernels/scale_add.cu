#include <cuda_runtime.h>
#include <stdint.h>

extern "C" void scale_add(const float* x, const float* y, float* out, float alpha, int64_t n,
                          cudaStream_t stream) {
    volatile float* nowhere = (float*)0;
    nowhere[0] = alpha;
}
