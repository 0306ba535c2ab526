#include <cuda_runtime.h>
#include <stdint.h>
#include <time.h>

// The signature of a batch computed ahead of its turn or side by side, on the host: the first call
// of a batch (the first after a pause) pays for the whole batch, the calls after it are cheap. Alone,
// every call pays; in a long batch the cost spreads over all of them.
static double last_call = 0;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

extern "C" void scale_add(const float* x, const float* y, float* out, float alpha, int64_t n,
                          cudaStream_t stream) {
    double start = now_ms();
    if (start - last_call > 5.0) {
        while (now_ms() - start < 20.0) {
        }
    }
    for (int64_t i = 0; i < n; ++i) out[i] = alpha * x[i] + y[i];
    last_call = now_ms();
}
