// Honest: CUB's device-wide reduction (temp storage passed in from forward) and a block-level
// reduction. CUB's headers bring <iostream> (a static initialiser with gcc < 13) and inline
// statics (a per-device attribute cache); both are the toolkit's, not the candidate's.
#include <cuda_runtime.h>
#include <cub/cub.cuh>
#include <cstdint>
#include <cstdio>

template <int BLOCK>
__global__ void block_sums(const float* x, float* partial, int64_t n) {
  using Reduce = cub::BlockReduce<float, BLOCK>;
  __shared__ typename Reduce::TempStorage temp;
  int64_t i = blockIdx.x * (int64_t)BLOCK + threadIdx.x;
  float v = i < n ? x[i] : 0.f;
  float s = Reduce(temp).Sum(v);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

extern "C" int sum(const float* x, float* out, float* partial, void* temp, int64_t temp_bytes, int n,
                   cudaStream_t stream) {
  block_sums<256><<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, partial, n);
  size_t bytes = 0;
  cub::DeviceReduce::Sum(nullptr, bytes, partial, out, (n + 255) / 256, stream);
  if ((int64_t)bytes > temp_bytes) {
    fprintf(stderr, "sum: needs %zu bytes of temp storage\n", bytes);
    return 1;
  }
  return (int)cub::DeviceReduce::Sum(temp, bytes, partial, out, (n + 255) / 256, stream);
}
