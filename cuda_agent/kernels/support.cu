// Linked into every kernel library: lets runtime.py read CUDA errors from the same CUDA runtime
// the launchers used (each library carries its own static cudart, so torch's cannot see them).
#include <cuda_runtime.h>
#include <cstdio>

extern "C" int cuda_agent_last_error(char* buf, int n) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess && buf != nullptr && n > 0) {
    snprintf(buf, n, "%s: %s", cudaGetErrorName(err), cudaGetErrorString(err));
  }
  return static_cast<int>(err);
}

extern "C" int cuda_agent_error_string(int code, char* buf, int n) {
  cudaError_t err = static_cast<cudaError_t>(code);
  if (buf != nullptr && n > 0) {
    snprintf(buf, n, "%s: %s", cudaGetErrorName(err), cudaGetErrorString(err));
  }
  return code;
}
