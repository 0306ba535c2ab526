// Honest: the cuBLAS handle created exactly once through std::call_once, with the flag and the
// handle at file scope, and again with both as function-local statics.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <mutex>

static std::once_flag g_once;
static cublasHandle_t g_handle = nullptr;

static cublasHandle_t handle() {
  std::call_once(g_once, [] { cublasCreate(&g_handle); });
  return g_handle;
}

static cublasHandle_t local_handle() {
  static std::once_flag once;
  static cublasHandle_t h = nullptr;
  std::call_once(once, [&] {
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) h = nullptr;
  });
  return h;
}

// y (m x n) = x (m x k) @ w^T, all row-major.
extern "C" int linear(const float* x, const float* w, float* y, int m, int n, int k, cudaStream_t stream) {
  cublasHandle_t h = handle();
  if (h == nullptr) return 1;
  cublasSetStream(h, stream);
  const float one = 1.f, zero = 0.f;
  return cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, k, x, k, &zero, y, n) == CUBLAS_STATUS_SUCCESS
             ? 0 : 2;
}

extern "C" int linear_local(const float* x, const float* w, float* y, int m, int n, int k, cudaStream_t stream) {
  const cublasHandle_t h = local_handle();
  if (!h) return 1;
  cublasSetStream(h, stream);
  const float one = 1.f, zero = 0.f;
  return cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, k, x, k, &zero, y, n) == CUBLAS_STATUS_SUCCESS
             ? 0 : 2;
}
