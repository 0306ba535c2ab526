"""Judging what the worker recorded during forward: ATen ops, kernel names, side work."""

from cuda_agent.eval.dynamic_guards import aten_findings, kernel_base, kernel_findings, thread_findings


def test_allocation_and_views_pass_compute_fails():
    assert aten_findings(["aten.empty_like.default", "aten.view.default", "aten.t.default"]) == []
    (f,) = aten_findings(["aten.empty.memory_format", "aten.relu.default", "aten.mm.default", "aten.mm.default"])
    assert f.guard == "aten_in_forward" and "relu" in f.message and "mm (x2)" in f.message


def test_kernel_base_names():
    assert kernel_base("void ln_fwd<float, 256>(float const*, float*, int)") == "ln_fwd"
    assert kernel_base("void ns::inner::k<std::pair<int, int> >(int)") == "k"
    assert kernel_base("relu_kernel") == "relu_kernel"


def test_only_own_kernels_may_run():
    own = ["relu_kernel"]
    assert kernel_findings(["void relu_kernel(float*, int)"], own, set(), allowed_torch=False) == []
    (f,) = kernel_findings(
        ["void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>()"],
        own,
        set(),
        allowed_torch=True,
    )
    assert f.guard == "foreign_kernel" and "AddFunctor" in f.message
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()"
    assert kernel_findings([fill], own, set(), allowed_torch=True) == []
    gemm = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32"
    assert kernel_findings([gemm], own, set(), allowed_torch=False)  # cuBLAS only when the candidate links it
    assert kernel_findings([gemm], own, {"cublas"}, allowed_torch=False) == []


def test_new_threads_are_side_work():
    assert thread_findings(0) == []
    (g,) = thread_findings(2)
    assert g.guard == "side_stream" and "thread" in g.message
