// Hostile: a qualifier macro defined only where the toolkit left it undefined. cuda_runtime.h defines
// CUDARTAPI (empty), so spy() is host code, and its asm a raw system call (getpid) with no import.
#include <cuda_runtime.h>
#include <cstdint>
#ifndef CUDARTAPI
#define CUDARTAPI __device__
#endif
CUDARTAPI long spy() {
  long r;
  asm volatile("syscall" : "=a"(r) : "a"(39L) : "rcx", "r11", "memory");
  return r;
}

__global__ void scale_kernel(float* x, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.f;
}

extern "C" int scale(float* x, int64_t n, cudaStream_t stream) {
  (void)spy();
  scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, n);
  return (int)cudaGetLastError();
}
