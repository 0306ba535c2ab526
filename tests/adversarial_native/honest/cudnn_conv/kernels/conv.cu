// Honest: a cuDNN forward convolution in fp32 FMA math (no TF32), the handle made once by a
// lambda-initialised static, the algorithm chosen once per shape and cached in a std::map keyed
// by the dims; descriptors made and destroyed on every call, the workspace from forward.
#include <cuda_runtime.h>
#include <cudnn.h>
#include <array>
#include <cstdint>
#include <cstdio>
#include <map>

static cudnnHandle_t cudnn() {
  static cudnnHandle_t handle = [] {
    cudnnHandle_t h = nullptr;
    if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) fprintf(stderr, "cudnnCreate failed\n");
    return h;
  }();
  return handle;
}

using ConvKey = std::array<int, 9>;  // n, c, h, w, k, r, s, pad, stride

static cudnnConvolutionFwdAlgo_t algo_for(cudnnHandle_t h, const ConvKey& key, cudnnTensorDescriptor_t xd,
                                          cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t conv,
                                          cudnnTensorDescriptor_t yd) {
  static std::map<ConvKey, cudnnConvolutionFwdAlgo_t> algos;
  auto it = algos.find(key);
  if (it != algos.end()) return it->second;
  cudnnConvolutionFwdAlgoPerf_t perf[4];
  int returned = 0;
  cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, conv, yd, 4, &returned, perf);
  const cudnnConvolutionFwdAlgo_t algo = returned > 0 ? perf[0].algo : CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  algos.emplace(key, algo);
  return algo;
}

extern "C" int conv2d(const float* x, const float* w, float* y, void* workspace, int64_t workspace_bytes, int n,
                      int c, int hgt, int wid, int k, int r, int s, int pad, int stride, cudaStream_t stream) {
  cudnnHandle_t h = cudnn();
  if (h == nullptr) return 1;
  cudnnSetStream(h, stream);
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t conv;
  cudnnCreateTensorDescriptor(&xd);
  cudnnCreateTensorDescriptor(&yd);
  cudnnCreateFilterDescriptor(&wd);
  cudnnCreateConvolutionDescriptor(&conv);
  const int ho = (hgt + 2 * pad - r) / stride + 1, wo = (wid + 2 * pad - s) / stride + 1;
  cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, hgt, wid);
  cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, ho, wo);
  cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, r, s);
  cudnnSetConvolution2dDescriptor(conv, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
  cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH);
  const cudnnConvolutionFwdAlgo_t algo = algo_for(h, ConvKey{n, c, hgt, wid, k, r, s, pad, stride}, xd, wd, conv, yd);
  size_t needed = 0;
  cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, conv, yd, algo, &needed);
  int rc = 0;
  if (needed > (size_t)workspace_bytes) {
    rc = 2;
  } else {
    const float one = 1.f, zero = 0.f;
    cudnnStatus_t st = cudnnConvolutionForward(h, &one, xd, x, wd, w, conv, algo, workspace, needed, &zero, yd, y);
    if (st != CUDNN_STATUS_SUCCESS) {
      fprintf(stderr, "conv2d: %s\n", cudnnGetErrorString(st));
      rc = 3;
    }
  }
  cudnnDestroyConvolutionDescriptor(conv);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyTensorDescriptor(xd);
  return rc;
}
