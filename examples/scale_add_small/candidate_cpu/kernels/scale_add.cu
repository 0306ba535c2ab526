// Host-only twin of ../../candidate/kernels/scale_add.cu, for a machine without a GPU (--device cpu).
// There the harness passes host pointers and a NULL stream, and a launcher that launches a __global__
// kernel is a runtime error: the launcher does the work itself, in a loop on the host. Its times say
// nothing about a GPU; it shows the whole pipeline (build, jail, checks, timing) reach a verdict.
#include <cuda_runtime.h>
#include <cstdint>

extern "C" void scale_add(const float* x, const float* y, float* out, int64_t n, cudaStream_t stream) {
    (void)stream;  // NULL in host-only mode
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * 2.0f + y[i];
}
