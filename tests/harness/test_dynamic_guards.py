"""Judging what the worker recorded during forward: ATen ops, kernel names, side work."""

from cuda_agent.eval.dynamic_guards import aten_findings, kernel_base, kernel_findings, side_work_findings


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


def test_side_work_gap_and_threads():
    assert side_work_findings(1.0, 1.05, 0) == []
    assert side_work_findings(0.01, 0.03, 0) == []  # launch overhead on a tiny kernel is no finding
    (f,) = side_work_findings(0.05, 2.0, 0)
    assert f.guard == "side_stream"
    (g,) = side_work_findings(1.0, 1.0, 2)
    assert g.guard == "side_stream" and "thread" in g.message


def _timing(mean_ms: float, reps: int = 300, warmup: int = 100):
    from cuda_agent.eval.verdict import Timing

    return Timing(
        median_ms=mean_ms,
        mean_ms=mean_ms,
        min_ms=mean_ms,
        max_ms=mean_ms,
        p20_ms=mean_ms,
        p80_ms=mean_ms,
        reps=reps,
        warmup=warmup,
        input_sets=2,
    )


def test_wall_clock_bound_catches_gross_under_reporting_only():
    from cuda_agent.eval.checks import wall_clock_bound

    # the parent timed the measured loop alone (300 reps it chose) and knows the judge's cost of a
    # rep around nothing (here 0.4 ms: hold, flush, synchronizes, events)
    # an honest 0.03 ms kernel: 300 reps took ~130 ms
    assert wall_clock_bound(_timing(0.03), 130.0, 300, overhead_ms=0.4) == []
    # an honest 1 ms kernel: 300 reps took ~430 ms
    assert wall_clock_bound(_timing(1.0), 430.0, 300, overhead_ms=0.4) == []
    # claims 0.01 ms per call while the parent watched 300 calls take 2 s
    (f,) = wall_clock_bound(_timing(0.01), 2000.0, 300, overhead_ms=0.4)
    assert f.guard == "timing_mismatch" and "0.0100 ms" in f.message
    # without a calibration (CPU judge that failed it) nothing is claimed either way
    assert wall_clock_bound(_timing(0.01), 2000.0, 300, overhead_ms=None) == []


def test_wall_clock_bound_is_loose_for_tiny_kernels():
    """Pipe latency and a loaded host stretch the wall time by milliseconds: a 3 us kernel is not
    accused, whatever its claim, unless the loop took far longer than overhead explains."""
    from cuda_agent.eval.checks import wall_clock_bound

    assert wall_clock_bound(_timing(0.003), 0.4 * 300 + 5.0, 300, overhead_ms=0.4) == []
    (f,) = wall_clock_bound(_timing(0.003), 3000.0, 300, overhead_ms=0.4)
    assert f.guard == "timing_mismatch"
