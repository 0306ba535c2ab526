// Exit-time code registered from a launcher: runs after the timed calls, when the process ends.
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdlib>

static void on_exit_hook() {}

__global__ void scale_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.f * x[i];
}

extern "C" void scale(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) atexit(on_exit_hook);
  scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
