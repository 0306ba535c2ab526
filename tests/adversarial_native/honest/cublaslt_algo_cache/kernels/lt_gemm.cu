// Honest: cuBLASLt in fp32 (CUBLAS_COMPUTE_32F), the handle in a static, and the algorithm the
// heuristic picks cached per shape: in a std::unordered_map keyed by a struct of the dims, and in a
// std::map keyed by a tuple (the whole heuristic result, with its workspace size). The descriptors
// are made and destroyed on every call; the workspace comes from forward.
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <tuple>
#include <unordered_map>

static cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t handle = nullptr;
  if (handle == nullptr && cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) handle = nullptr;
  return handle;
}

struct GemmKey {
  int64_t m, n, k;
  bool operator==(const GemmKey& o) const { return m == o.m && n == o.n && k == o.k; }
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& key) const noexcept {
    size_t h = std::hash<int64_t>()(key.m);
    h = h * 31 + std::hash<int64_t>()(key.n);
    return h * 31 + std::hash<int64_t>()(key.k);
  }
};

// D (m x n) = A (m x k) @ B^T (B is n x k), row-major, seen by cuBLASLt as column-major D^T = B A^T.
struct Problem {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;

  Problem(int64_t m, int64_t n, int64_t k) {
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t trans = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep));
    cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, k, n, k);
    cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, k, m, k);
    cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, n, m, n);
  }
  ~Problem() {
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(op);
  }
};

static bool heuristic(cublasLtHandle_t lt, const Problem& p, size_t workspace_bytes,
                      cublasLtMatmulHeuristicResult_t* best) {
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                       sizeof(workspace_bytes));
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.d, p.d, pref, 1, best, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  return found > 0;
}

// The algorithm for this shape: asked once, then read from the cache.
static bool algo_for(cublasLtHandle_t lt, const Problem& p, const GemmKey& key, size_t workspace_bytes,
                     cublasLtMatmulAlgo_t* algo) {
  static std::unordered_map<GemmKey, cublasLtMatmulAlgo_t, GemmKeyHash> algos;
  auto it = algos.find(key);
  if (it == algos.end()) {
    cublasLtMatmulHeuristicResult_t result = {};
    if (!heuristic(lt, p, workspace_bytes, &result)) return false;
    it = algos.emplace(key, result.algo).first;
  }
  *algo = it->second;
  return true;
}

extern "C" int lt_linear(const float* x, const float* w, float* y, void* workspace, int64_t workspace_bytes,
                         int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  cublasLtHandle_t lt = lt_handle();
  if (lt == nullptr) return 1;
  Problem p(m, n, k);
  cublasLtMatmulAlgo_t algo;
  if (!algo_for(lt, p, GemmKey{m, n, k}, (size_t)workspace_bytes, &algo)) return 2;
  const float one = 1.f, zero = 0.f;
  cublasStatus_t st = cublasLtMatmul(lt, p.op, &one, w, p.a, x, p.b, &zero, y, p.d, y, p.d, &algo, workspace,
                                     (size_t)workspace_bytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "lt_linear: cublasLtMatmul failed (%d)\n", (int)st);
    return 3;
  }
  return 0;
}

// The same product, the heuristic result cached whole in a std::map keyed by a tuple of the dims.
static cublasLtMatmulHeuristicResult_t best_for(cublasLtHandle_t lt, const Problem& p, int64_t m, int64_t n,
                                                int64_t k, size_t workspace_bytes) {
  static std::map<std::tuple<int64_t, int64_t, int64_t>, cublasLtMatmulHeuristicResult_t> cache;
  const auto key = std::make_tuple(m, n, k);
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  cublasLtMatmulHeuristicResult_t result = {};
  if (!heuristic(lt, p, workspace_bytes, &result)) result.state = CUBLAS_STATUS_NOT_INITIALIZED;
  cache[key] = result;
  return result;
}

extern "C" int lt_linear_mapped(const float* x, const float* w, float* y, void* workspace,
                                int64_t workspace_bytes, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  cublasLtHandle_t lt = lt_handle();
  if (!lt) return 1;
  Problem p(m, n, k);
  const cublasLtMatmulHeuristicResult_t best = best_for(lt, p, m, n, k, (size_t)workspace_bytes);
  if (best.state != CUBLAS_STATUS_SUCCESS || best.workspaceSize > (size_t)workspace_bytes) return 2;
  const float one = 1.f, zero = 0.f;
  return cublasLtMatmul(lt, p.op, &one, w, p.a, x, p.b, &zero, y, p.d, y, p.d, &best.algo, workspace,
                        best.workspaceSize, stream) == CUBLAS_STATUS_SUCCESS ? 0 : 3;
}
