// Honest: an embedding-style row gather; debug builds (no NDEBUG: the harness's flags) check indices
// with a device assert and the launcher's arguments with host asserts; release builds skip both.
#include <cuda_runtime.h>
#include <cassert>
#include <cstdint>
#include <cstdio>

__global__ void gather_rows(const float* __restrict__ table, const int64_t* __restrict__ idx, float* __restrict__ out,
                            int64_t n_idx, int64_t n_rows, int64_t dim) {
  const int64_t r = blockIdx.x;
  if (r >= n_idx) return;
  const int64_t src = idx[r];
#ifndef NDEBUG
  assert(src >= 0 && src < n_rows);
#endif
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) out[r * dim + c] = table[src * dim + c];
}

extern "C" int embedding(const float* table, const int64_t* idx, float* out, int64_t n_idx, int64_t n_rows,
                         int64_t dim, cudaStream_t stream) {
#ifndef NDEBUG
  assert(table != nullptr && idx != nullptr && out != nullptr);
  if (dim > (int64_t)1 << 24) fprintf(stderr, "embedding: unusually wide rows (%lld)\n", (long long)dim);
#endif
  if (n_idx <= 0) return 0;
  gather_rows<<<(unsigned)n_idx, 128, 0, stream>>>(table, idx, out, n_idx, n_rows, dim);
  return (int)cudaGetLastError();
}
