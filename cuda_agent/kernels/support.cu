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

// Kernel launches, counted: build.py links with --wrap for these entry points (`<<<...>>>` goes
// through __cudaPushCallConfiguration), so each launch passes here first. Host-only mode (no GPU,
// or --device cpu) asks after each launcher call whether it launched anything: there a launch does
// nothing, and reading the error state alone cannot tell (without a driver it is always set).
static unsigned long long cuda_agent_launch_count = 0;

extern "C" {
unsigned __real___cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, struct CUstream_st* stream);
cudaError_t __real_cudaLaunchKernel(const void* fn, dim3 grid, dim3 block, void** args, size_t shared,
                                    cudaStream_t stream);
cudaError_t __real_cudaLaunchCooperativeKernel(const void* fn, dim3 grid, dim3 block, void** args, size_t shared,
                                               cudaStream_t stream);

unsigned __wrap___cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, struct CUstream_st* stream) {
  ++cuda_agent_launch_count;
  return __real___cudaPushCallConfiguration(grid, block, shared, stream);
}

cudaError_t __wrap_cudaLaunchKernel(const void* fn, dim3 grid, dim3 block, void** args, size_t shared,
                                    cudaStream_t stream) {
  ++cuda_agent_launch_count;
  return __real_cudaLaunchKernel(fn, grid, block, args, shared, stream);
}

cudaError_t __wrap_cudaLaunchCooperativeKernel(const void* fn, dim3 grid, dim3 block, void** args, size_t shared,
                                               cudaStream_t stream) {
  ++cuda_agent_launch_count;
  return __real_cudaLaunchCooperativeKernel(fn, grid, block, args, shared, stream);
}

// The launches since the last call (and the count starts again).
unsigned long long cuda_agent_launches() {
  unsigned long long n = cuda_agent_launch_count;
  cuda_agent_launch_count = 0;
  return n;
}
}
