"""Judging what the worker recorded during forward: ATen ops, kernel names, side work."""

from cuda_agent.eval.dynamic_guards import judge_aten, judge_kernels, judge_side_work, kernel_base


def test_allocation_and_views_pass_compute_fails():
    assert judge_aten(["aten.empty_like.default", "aten.view.default", "aten.t.default"]) == []
    (f,) = judge_aten(["aten.empty.memory_format", "aten.relu.default", "aten.mm.default", "aten.mm.default"])
    assert f.guard == "aten_in_forward" and "relu" in f.message and "mm (x2)" in f.message


def test_kernel_base_names():
    assert kernel_base("void ln_fwd<float, 256>(float const*, float*, int)") == "ln_fwd"
    assert kernel_base("void ns::inner::k<std::pair<int, int> >(int)") == "k"
    assert kernel_base("relu_kernel") == "relu_kernel"


def test_only_own_kernels_may_run():
    own = ["relu_kernel"]
    assert judge_kernels(["void relu_kernel(float*, int)"], own, set(), allowed_torch=False) == []
    (f,) = judge_kernels(["void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>()"],
                         own, set(), allowed_torch=True)
    assert f.guard == "foreign_kernel" and "AddFunctor" in f.message
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()"
    assert judge_kernels([fill], own, set(), allowed_torch=True) == []
    gemm = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32"
    assert judge_kernels([gemm], own, set(), allowed_torch=False)  # cuBLAS only when the candidate links it
    assert judge_kernels([gemm], own, {"cublas"}, allowed_torch=False) == []


def test_side_work_gap_and_threads():
    assert judge_side_work(1.0, 1.05, 0) == []
    assert judge_side_work(0.01, 0.03, 0) == []  # launch overhead on a tiny kernel is no finding
    (f,) = judge_side_work(0.05, 2.0, 0)
    assert f.guard == "side_stream"
    (g,) = judge_side_work(1.0, 1.0, 2)
    assert g.guard == "side_stream" and "thread" in g.message


def _timing(mean_ms: float, reps: int = 300, warmup: int = 100):
    from cuda_agent.eval.verdict import Timing

    return Timing(median_ms=mean_ms, mean_ms=mean_ms, min_ms=mean_ms, max_ms=mean_ms, p20_ms=mean_ms,
                  p80_ms=mean_ms, reps=reps, warmup=warmup, input_sets=2)


def test_wall_clock_bound_catches_gross_under_reporting_only():
    from cuda_agent.eval.checks import wall_clock_bound
    from cuda_agent.eval.timing import TimingConfig

    cfg = TimingConfig()
    # an honest 0.03 ms kernel: 400 reps with ~0.15 ms overhead each took ~75 ms of wall time
    assert wall_clock_bound(_timing(0.03), 75.0, cfg, overhead_ms=0.5) == []
    # an honest 1 ms kernel: 400 reps took ~460 ms
    assert wall_clock_bound(_timing(1.0), 460.0, cfg, overhead_ms=0.5) == []
    # claims 0.01 ms per call while the parent watched 400 calls take 2 s
    (f,) = wall_clock_bound(_timing(0.01), 2000.0, cfg, overhead_ms=0.5)
    assert f.guard == "timing_mismatch"


def test_wall_clock_bound_allows_for_the_stream_hold():
    from cuda_agent.eval.checks import wall_clock_bound
    from cuda_agent.eval.timing import TimingConfig

    # an honest 0.003 ms kernel: 400 reps each with a 0.2 ms hold and ~0.15 ms overhead: ~140 ms
    assert wall_clock_bound(_timing(0.003), 140.0 + 500, TimingConfig(hold_ms=0.2), overhead_ms=0.5) == []
    (f,) = wall_clock_bound(_timing(0.003), 3000.0, TimingConfig(hold_ms=0.2), overhead_ms=0.5)
    assert f.guard == "timing_mismatch"


class _FakeDevice:
    """A GPU clock for the stream-hold calibration: spin(c) takes c / cycles_per_ms ms."""

    def __init__(self, cycles_per_ms: float):
        self.cycles_per_ms, self.now, self.spins = cycles_per_ms, 0.0, []

    def spin(self, cycles: int) -> None:
        self.spins.append(cycles)
        self.now += cycles / self.cycles_per_ms

    def event_cls(self, enable_timing=True):
        dev = self

        class Event:
            def record(self):
                self.at = dev.now

            def elapsed_time(self, other):
                return other.at - self.at

        return Event()


def test_stream_holder_is_calibrated_to_the_requested_hold():
    from cuda_agent.eval.timing import _stream_holder

    dev = _FakeDevice(cycles_per_ms=1.98e6)
    hold = _stream_holder(dev.spin, dev.event_cls, lambda: None, hold_ms=0.2)
    before = dev.now
    hold()
    assert abs((dev.now - before) - 0.2) < 1e-3
    assert _stream_holder(None, dev.event_cls, lambda: None, 0.2) is None  # no spin kernel in this torch
    assert _stream_holder(dev.spin, dev.event_cls, lambda: None, 0.0) is None  # turned off
