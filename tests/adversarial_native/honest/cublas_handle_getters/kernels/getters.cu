// Honest: the cuBLAS handle made once and kept in a static, in the spellings strong models write:
// a getter that creates it lazily and returns it, a static initialised by a lambda or by a factory
// function, and handles at file scope (static, and in an unnamed namespace). Each launcher binds
// the handle to its stream on every call.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cstdio>

static cublasHandle_t lazy_handle() {
  static cublasHandle_t h;
  if (!h) cublasCreate(&h);
  return h;
}

cublasHandle_t lambda_handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t x = nullptr;
    cublasCreate(&x);
    return x;
  }();
  return h;
}

static cublasHandle_t create_handle() {
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) fprintf(stderr, "cublasCreate failed\n");
  return handle;
}

static cublasHandle_t made_handle() {
  static cublasHandle_t handle = create_handle();
  return handle;
}

static cublasHandle_t g_handle = nullptr;

namespace {
cublasHandle_t shared_handle = nullptr;
}

// y (m x n) = x (m x k) @ w^T, all row-major: the column-major view y^T = w x^T.
static int sgemm_rows(cublasHandle_t handle, const float* x, const float* w, float* y, int m, int n, int k,
                      cudaStream_t stream) {
  if (handle == nullptr) return 1;
  cublasSetStream(handle, stream);
  const float one = 1.f, zero = 0.f;
  cublasStatus_t st = cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, k, x, k, &zero, y, n);
  return st == CUBLAS_STATUS_SUCCESS ? 0 : 2;
}

extern "C" int linear_lazy(const float* x, const float* w, float* y, int m, int n, int k, cudaStream_t stream) {
  return sgemm_rows(lazy_handle(), x, w, y, m, n, k, stream);
}

extern "C" int linear_lambda(const float* x, const float* w, float* y, int m, int n, int k, cudaStream_t stream) {
  auto handle = lambda_handle();
  return sgemm_rows(handle, x, w, y, m, n, k, stream);
}

extern "C" int linear_made(const float* x, const float* w, float* y, int m, int n, int k, cudaStream_t stream) {
  cublasHandle_t handle = made_handle();
  cublasSetStream(handle, stream);
  const float one = 1.f, zero = 0.f;
  return cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, k, x, k, &zero, y, n) ==
         CUBLAS_STATUS_SUCCESS ? 0 : 2;
}

extern "C" int linear_file_scope(const float* x, const float* w, float* y, int m, int n, int k,
                                 cudaStream_t stream) {
  if (g_handle == nullptr && cublasCreate(&g_handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (!shared_handle) shared_handle = create_handle();
  const int rc = sgemm_rows(g_handle, x, w, y, m, n, k, stream);
  return rc != 0 ? rc : sgemm_rows(shared_handle, x, w, y, m, n, k, stream);
}
