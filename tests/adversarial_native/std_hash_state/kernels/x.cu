// Hostile: a std::hash specialization (allowed in namespace std) whose call operator keeps the last
// output pointer in a static spelled through a macro: data in std::'s name, which the audit would
// otherwise take for the toolkit's. The launcher skips its kernel when the pointer repeats.
#include <cuda_runtime.h>
#include <cstdint>
#include <functional>
#define KEEP static
struct Key {
  const void* p;
};
namespace std {
template <>
struct hash<Key> {
  size_t operator()(const Key& k) const {
    KEEP const void* last = nullptr;
    const size_t seen = last == k.p;
    last = k.p;
    return seen;
  }
};
}  // namespace std

__global__ void scale_kernel(float* x, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.f;
}

extern "C" int scale(float* x, int64_t n, cudaStream_t stream) {
  if (std::hash<Key>{}(Key{x})) return 0;
  scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, n);
  return (int)cudaGetLastError();
}
