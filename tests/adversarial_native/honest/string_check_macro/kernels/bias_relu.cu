// Honest: TORCH_CHECK / C10_CUDA_KERNEL_LAUNCH_CHECK look-alikes written by hand: a failed check
// throws std::runtime_error with a std::string message (file, line, CUDA error text); the extern "C"
// launcher catches it, prints it and returns non-zero (exceptions must not cross the C boundary).
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#define KCHECK(cond, msg)                                                                               \
  do {                                                                                                  \
    if (!(cond))                                                                                        \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + (msg)); \
  } while (0)

#define KERNEL_LAUNCH_CHECK()                                                      \
  do {                                                                             \
    const cudaError_t e_ = cudaGetLastError();                                     \
    KCHECK(e_ == cudaSuccess, std::string("launch failed: ") + cudaGetErrorString(e_)); \
  } while (0)

__global__ void bias_relu_kernel(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,
                                 int64_t rows, int64_t cols) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) {
    const float v = x[i] + b[i % cols];
    y[i] = v < 0.f ? 0.f : v;
  }
}

static void launch(const float* x, const float* b, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  KCHECK(rows >= 0 && cols > 0, "bad shape " + std::to_string(rows) + "x" + std::to_string(cols));
  const int64_t n = rows * cols;
  if (n == 0) return;
  bias_relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, b, y, rows, cols);
  KERNEL_LAUNCH_CHECK();
}

extern "C" int bias_relu(const float* x, const float* b, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  try {
    launch(x, b, y, rows, cols, stream);
  } catch (const std::exception& e) {
    fprintf(stderr, "bias_relu: %s\n", e.what());
    return 1;
  }
  return 0;
}
