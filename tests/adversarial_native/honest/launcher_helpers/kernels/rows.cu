// Honest: what launchers commonly use around a kernel: occupancy queries, dynamic shared memory,
// a cluster launch, a cooperative launch, std::vector and a caught exception, stderr, libm.
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <vector>

namespace cg = cooperative_groups;

__global__ void rows_kernel(const float* x, float* y, int64_t rows, int64_t cols) {
  extern __shared__ float tile[];
  int64_t r = blockIdx.x;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) tile[c % 1024] = x[r * cols + c];
  __syncthreads();
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) y[r * cols + c] = sqrtf(fabsf(tile[c % 1024]));
}

__global__ void grid_pass(float* y, int64_t n) {
  cg::this_grid().sync();
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] += 0.f;
}

static int plan_blocks(int64_t rows) {
  if (rows <= 0) throw std::invalid_argument("rows must be positive");
  return (int)rows;
}

extern "C" int rows_sqrt(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  int blocks;
  try {
    blocks = plan_blocks(rows);
  } catch (const std::exception& e) {
    fprintf(stderr, "rows_sqrt: %s\n", e.what());
    return 1;
  }
  std::vector<int64_t> dims = {rows, cols};
  int device = 0, sms = 0, min_grid = 0, block = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaFuncSetAttribute(rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 4096);
  cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, rows_kernel, 4096, 256);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)blocks);
  cfg.blockDim = dim3(256);
  cfg.dynamicSmemBytes = 4096;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, rows_kernel, x, y, dims[0], dims[1]);
  int64_t n = rows * cols;
  void* args[] = {&y, &n};
  cudaLaunchCooperativeKernel((void*)grid_pass, dim3(sms > 0 ? sms : 1), dim3(128), args, 0, stream);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    char msg[128];
    snprintf(msg, sizeof msg, "rows_sqrt: %s (%.1f)", cudaGetErrorString(err), std::log2(double(n)));
    fputs(msg, stderr);
    return 2;
  }
  return 0;
}
