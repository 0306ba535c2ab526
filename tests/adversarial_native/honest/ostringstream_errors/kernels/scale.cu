// Honest: a launcher that builds its error text with std::ostringstream and std::to_string, throws
// std::invalid_argument, catches it at the C boundary and prints it to std::cerr / std::cout.
#include <cuda_runtime.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <iostream>
__global__ void k(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.f; }
extern "C" int run(float* x, int n, cudaStream_t s) {
  try {
    if (n < 0) {
      std::ostringstream oss;
      oss << "bad n " << n << " " << 1.5f << " " << (void*)x;
      throw std::invalid_argument(oss.str());
    }
    k<<<(n + 255) / 256, 256, 0, s>>>(x, n);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) { std::cout << "err " << cudaGetErrorString(e) << std::endl; std::string m = "x" + std::to_string(n); std::cerr << m << '\n'; }
    return (int)e;
  } catch (const std::exception& ex) { std::cerr << ex.what() << std::endl; return -1; }
}
