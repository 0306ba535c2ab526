// Honest: a launcher that builds its error text with std::ostringstream and std::to_string, throws
// std::invalid_argument, catches it at the C boundary and prints it with fprintf(stderr, ...).
#include <cuda_runtime.h>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>

__global__ void scale_kernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.f;
}

static void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

extern "C" int scale(float* x, int n, cudaStream_t stream) {
  try {
    std::ostringstream oss;
    oss << "scale: n must be >= 0, got " << n << " (x at " << static_cast<const void*>(x) << ")";
    check(n >= 0, oss.str());
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, n);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      const std::string msg = "scale: launch failed for n=" + std::to_string(n) + ": " + cudaGetErrorString(e);
      std::fprintf(stderr, "%s\n", msg.c_str());
    }
    return static_cast<int>(e);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "%s\n", ex.what());
    return -1;
  }
}
