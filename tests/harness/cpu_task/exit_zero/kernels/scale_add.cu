// Hostile: writes the right answer, then ends the judge with exit(0), hoping a clean exit code
// reads as success. A judge that dies mid-request is a runtime_error, whatever its exit code.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

extern "C" void scale_add(const float* x, const float* y, float* out, float alpha, int64_t n,
                          cudaStream_t stream) {
    for (int64_t i = 0; i < n; ++i) out[i] = alpha * x[i] + y[i];
    exit(0);
}
