"""The static TF32 rule on math modes given by number (issue 25, item 8): a note that says what to write,
since the numeric precision check now catches what the mode does; named honest modes never fire."""

import pytest

from cuda_agent.eval.guards.static_cu import check_cuda_source

GEMM_ARGS = "h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &a, A, CUDA_R_32F, m, B, CUDA_R_32F, k, &b, C, CUDA_R_32F, m"


def precision(src: str, **kw) -> list:
    kw.setdefault("task_fp32", True)
    return [f for f in check_cuda_source(src.encode(), "kernels/k.cu", **kw) if f.guard == "precision"]


@pytest.mark.parametrize(
    "src, named",
    [
        ("void f(cublasHandle_t h) { cublasSetMathMode(h, (cublasMath_t)3); }", "CUBLAS_TF32_TENSOR_OP_MATH"),
        (
            "void f(cublasHandle_t h) { cublasSetMathMode(h, static_cast<cublasMath_t>(3)); }",
            "CUBLAS_TF32_TENSOR_OP_MATH",
        ),
        ("void f(cublasHandle_t h) { cublasSetMathMode(h, cublasMath_t(0x3)); }", "CUBLAS_TF32_TENSOR_OP_MATH"),
        (
            "#define MODE 3\nvoid f(cublasHandle_t h) { cublasSetMathMode(h, (cublasMath_t)MODE); }",
            "CUBLAS_TF32_TENSOR_OP_MATH",
        ),
        (
            "#define MODE ((cublasMath_t)3)\nvoid f(cublasHandle_t h) { cublasSetMathMode(h, MODE); }",
            "CUBLAS_TF32_TENSOR_OP_MATH",
        ),
        (  # a plain number through a #define (another regex of that module once shadowed the one reading it)
            "#define MODE 3\nvoid f(cublasHandle_t h) { cublasSetMathMode(h, MODE); }",
            "CUBLAS_TF32_TENSOR_OP_MATH",
        ),
        (
            "constexpr int kMode = 3;\nvoid f(cublasHandle_t h) { cublasSetMathMode(h, (cublasMath_t)kMode); }",
            "CUBLAS_TF32_TENSOR_OP_MATH",
        ),
        (
            f"void f(cublasHandle_t h) {{ cublasGemmEx({GEMM_ARGS}, 77, CUBLAS_GEMM_DEFAULT); }}",
            "CUBLAS_COMPUTE_32F_FAST_TF32",
        ),
        (
            f"#define CT 74\nvoid f(cublasHandle_t h) {{ cublasGemmEx({GEMM_ARGS}, CT, CUBLAS_GEMM_DEFAULT); }}",
            "CUBLAS_COMPUTE_32F_FAST_16F",
        ),
        (
            "#define CT 77\nvoid f() { cublasLtMatmulDescCreate(&d, (cublasComputeType_t)CT, CUDA_R_32F); }",
            "CUBLAS_COMPUTE_32F_FAST_TF32",
        ),
        ("void f() { cublasLtMatmulDescCreate(&d, 77, CUDA_R_32F); }", "CUBLAS_COMPUTE_32F_FAST_TF32"),
        ("void f(int mode) { cublasSetMathMode(h, (cublasMath_t)mode); }", None),  # a variable: a note too
    ],
)
def test_a_mode_given_by_number_is_a_note_naming_what_to_write(src, named):
    found = precision(src)
    assert found and {f.severity for f in found} == {"warn"}
    assert all("CUBLAS_DEFAULT_MATH" in f.message and "CUBLAS_COMPUTE_32F" in f.message for f in found)
    if named:
        assert any(named in f.message for f in found)
    assert all(f.where.startswith("kernels/k.cu:") for f in found)
    assert precision(src, task_fp32=False) == []  # an fp16 task may use any mode


@pytest.mark.parametrize(
    "src",
    [
        "void f(cublasHandle_t h) { cublasSetMathMode(h, CUBLAS_DEFAULT_MATH); }",
        "void f(cublasHandle_t h) { cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH); }",
        "void f(cublasHandle_t h) { cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH | "
        "CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)); }",
        f"void f(cublasHandle_t h) {{ cublasGemmEx({GEMM_ARGS}, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT); }}",
        f"void f(cublasHandle_t h) {{ cublasGemmEx({GEMM_ARGS}, CUBLAS_COMPUTE_32F_PEDANTIC, "
        f"CUBLAS_GEMM_DEFAULT_TENSOR_OP); }}",
        "void f() { cublasComputeType_t ct = CUBLAS_COMPUTE_32F; cublasLtMatmulDescCreate(&d, ct, CUDA_R_32F); }",
        "void set(cublasHandle_t h, cublasMath_t mode) { cublasSetMathMode(h, mode); }",
        '// cublasSetMathMode(h, (cublasMath_t)3);\nvoid f() { const char* s = "(cublasMath_t)3"; }',
        "void f(cudnnConvolutionDescriptor_t d) { cudnnSetConvolutionMathType(d, CUDNN_FMA_MATH); }",
        "void f() { cudaDataType t = CUDA_R_32F; int x = (int)3; }",
    ],
)
def test_honest_named_modes_never_fire(src):
    assert precision(src) == []


def test_named_tf32_mode_stays_a_failure():
    found = precision("void f(cublasHandle_t h) { cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH); }")
    assert {f.severity for f in found} == {"fail"}
