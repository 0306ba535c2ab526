"""The output gate: judged against float64 truth, strict on NaN/Inf, layout and precision."""

import pytest
import torch
import torch.nn as nn

from cuda_agent.eval.compare import compare_output
from cuda_agent.eval.precision import precision_finding
from cuda_agent.eval.tolerance import Tolerances, for_dtype
from cuda_agent.eval.zero_trap import trivial_output_passes, zero_trap

TOL = Tolerances()


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def gemm_refs(m=256, k=512, n=256, seed=0):
    """(A, B, ref32, ref64) for a float32 GEMM on random data."""
    g = gen(seed)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    return a, b, a @ b, a.double() @ b.double()


def round_to_tf32(t: torch.Tensor) -> torch.Tensor:
    """Round-to-nearest to tf32's 10-bit mantissa, as tensor cores do with fp32 inputs."""
    bits = t.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


# -- tolerances ----------------------------------------------------------------------


def test_tolerances_per_dtype_and_presets():
    assert for_dtype(torch.float32) == (1e-4, 1e-4)
    assert for_dtype(torch.float16) == (1e-2, 1e-2)
    assert for_dtype(torch.bfloat16) == (1e-2, 1e-2)
    assert for_dtype(torch.float64) == (1e-7, 1e-7)
    assert for_dtype(torch.int64) == (0.0, 0.0) and for_dtype(torch.bool) == (0.0, 0.0)
    loose = Tolerances.preset("cuda-agent")
    assert {loose.for_dtype(d) for d in (torch.float32, torch.float16, torch.float64)} == {(1e-2, 1e-2)}
    assert TOL.precision_budget == 5e-5 and TOL.ref_error_factor == 16
    with pytest.raises(ValueError):
        TOL.for_dtype(torch.float8_e4m3fn)
    with pytest.raises(ValueError):
        Tolerances.preset("nope")


# -- judged against truth ------------------------------------------------------------


def cancelling_rows(rows=128, k=16384, seed=0):
    """Rows whose sum nearly cancels: fp32's own rounding error is far above 1e-4 here."""
    g = gen(seed)
    v = torch.randn(rows, k // 2, generator=g, dtype=torch.float64) * 100
    a = torch.cat([v, -v], 1) + torch.randn(rows, k, generator=g, dtype=torch.float64) * 1e-3
    return a[:, torch.randperm(k, generator=g)].float()


def test_honest_reordered_sum_passes_truth_gate_but_not_plain_allclose():
    a = cancelling_rows()
    ref32, ref64 = a.sum(1), a.double().sum(1)
    blocked = a.view(a.shape[0], 128, -1).sum(2).sum(1)  # a block reduce: another order, same fp32
    assert not torch.allclose(blocked, ref32, rtol=1e-4, atol=1e-4)  # KernelBench's check would fail it
    check = compare_output(0, blocked, ref32, ref64, TOL)
    assert check.ok, check.reason
    assert check.ref_norm_rel_err > 1e-3  # the reference itself is that far from the truth
    assert precision_finding(check, TOL, task_fp32=True) is None


def test_more_exact_than_the_reference_passes():
    a = cancelling_rows(seed=1)
    ref32, ref64 = a.sum(1), a.double().sum(1)
    check = compare_output(0, ref64.float(), ref32, ref64, TOL)
    assert check.ok and check.norm_rel_err < check.ref_norm_rel_err


def test_honest_fp32_gemm_in_another_order_has_no_precision_finding():
    a, b, ref32, ref64 = gemm_refs()
    split_k = a[:, :256] @ b[:256] + a[:, 256:] @ b[256:]
    check = compare_output(0, split_k, ref32, ref64, TOL)
    assert check.ok and check.mismatched == 0
    assert check.norm_rel_err < 1e-6
    assert precision_finding(check, TOL, task_fp32=True) is None


def test_fp16_round_trip_of_gemm_output_is_a_precision_failure():
    _, _, ref32, ref64 = gemm_refs()
    for low in (torch.float16, torch.bfloat16):
        check = compare_output(0, ref32.to(low).float(), ref32, ref64, TOL)
        assert not check.ok
        finding = precision_finding(check, TOL, task_fp32=True)
        assert finding is not None and finding.guard == "precision" and finding.severity == "fail"
        assert "budget" in finding.message
        assert precision_finding(check, TOL, task_fp32=True, allow_precision=True).severity == "warn"
        assert precision_finding(check, TOL, task_fp32=False) is None  # an fp16 task may do this


def test_tf32_like_error_is_flagged_even_where_the_tolerance_lets_it_pass():
    a, b, ref32, ref64 = gemm_refs(k=64)
    tf32 = round_to_tf32(a) @ round_to_tf32(b)
    loose = Tolerances.preset("cuda-agent")
    check = compare_output(0, tf32, ref32, ref64, loose)
    assert check.ok  # 1e-2 lets it through elementwise ...
    finding = precision_finding(check, loose, task_fp32=True)
    assert finding is not None and finding.severity == "fail"  # ... the precision check does not
    assert check.norm_rel_err > 1e-4


# -- non-finite values ---------------------------------------------------------------


def test_nan_where_reference_is_finite_fails():
    ref = torch.randn(64, 64, generator=gen())
    out = ref.clone()
    out[3, 7] = float("nan")
    check = compare_output(0, out, ref, ref.double(), TOL)
    assert not check.ok and check.mismatched == 1
    assert "[3, 7]" in check.reason and "NaN" in check.reason


def test_matching_nan_and_inf_pass_but_inf_sign_must_match():
    ref = torch.randn(32, generator=gen())
    ref[[1, 5, 9]] = torch.tensor([float("nan"), float("inf"), float("-inf")])
    assert compare_output(0, ref.clone(), ref, ref.double(), TOL).ok
    flipped = ref.clone()
    flipped[9] = float("inf")
    assert not compare_output(0, flipped, ref, ref.double(), TOL).ok
    finite_instead = ref.clone()
    finite_instead[1] = 0.0
    assert not compare_output(0, finite_instead, ref, ref.double(), TOL).ok


def test_partial_write_fails_even_on_a_small_region():
    ref = torch.randn(4096, 1024, generator=gen()).relu() * 2 + 1
    out = ref.clone()
    out[2048:] = float("nan")  # what the harness's poison looks like where nothing wrote
    check = compare_output(0, out, ref, ref.double(), TOL)
    assert not check.ok and check.mismatched == 2048 * 1024


# -- layout and type -----------------------------------------------------------------


def test_layout_problems_fail_with_a_reason():
    ref = torch.randn(8, 16, generator=gen())
    cases = {
        "Parameter": nn.Parameter(ref.clone(), requires_grad=False),
        "shape": ref.clone().view(16, 8),
        "dtype": ref.double(),
        "strides": ref.t().contiguous().t(),
    }
    for word, out in cases.items():
        check = compare_output(0, out, ref, ref.double(), TOL)
        assert not check.ok and word in check.reason, (word, check.reason)


def test_size_one_dims_may_have_any_stride():
    ref = torch.randn(1, 64, generator=gen())
    out = torch.randn(64, 1, generator=gen()).t()  # same values layout, stride of dim 0 differs
    out.copy_(ref)
    assert compare_output(0, out, ref, None, TOL).ok


def test_chunking_gives_the_same_answer_and_points_at_the_element():
    ref = torch.randn(300, 200, generator=gen()).t()  # non-contiguous, walked in memory order
    out = ref.clone(memory_format=torch.preserve_format)
    out[150, 17] += 1.0
    whole = compare_output(0, out, ref, ref.double(), TOL)
    chunked = compare_output(0, out, ref, ref.double(), TOL, chunk_elems=37)
    exact = {"ok", "mismatched", "reason", "max_abs_err", "max_rel_err"}
    assert whole.model_dump(include=exact) == chunked.model_dump(include=exact)
    assert chunked.norm_rel_err == pytest.approx(whole.norm_rel_err, rel=1e-12)  # sums in another order
    assert not whole.ok and whole.mismatched == 1 and "[150, 17]" in whole.reason


def test_integers_compare_exactly_even_beyond_float64_precision():
    ref = torch.full((4,), 2**60, dtype=torch.int64)
    out = ref.clone()
    out[2] += 1  # invisible after a float64 conversion
    assert not compare_output(0, out, ref, None, TOL).ok
    assert compare_output(0, ref.clone(), ref, None, TOL).ok


def test_complex_outputs_compare_as_pairs():
    ref = torch.randn(16, 16, dtype=torch.complex64, generator=gen())
    assert compare_output(0, ref.clone(), ref, ref.to(torch.complex128), TOL).ok
    assert not compare_output(0, ref.conj().resolve_conj(), ref, ref.to(torch.complex128), TOL).ok


# -- zero trap -----------------------------------------------------------------------


def test_zero_trap_on_a_tiny_output_is_tightened_until_zeros_fail():
    x = torch.randn(1024, 256, generator=gen())
    ref32, ref64 = x * 1e-6, x.double() * 1e-6
    zeros = torch.zeros_like(ref32)
    assert compare_output(0, zeros, ref32, ref64, TOL).ok  # the trap: zeros pass at atol=1e-4
    assert trivial_output_passes(ref32, ref64, TOL) == "an all-zero output"
    trap = zero_trap(ref32, ref64, TOL)
    assert trap.informative and "zero trap" in trap.note and "tightened" in trap.note
    assert not compare_output(0, zeros, ref32, ref64, trap.tol).ok
    assert compare_output(0, ref32.clone(), ref32, ref64, trap.tol).ok  # the honest answer still passes


def test_constant_output_trap_on_a_wide_softmax():
    x = torch.randn(4, 100_000, generator=gen())
    ref32, ref64 = torch.softmax(x, 1), torch.softmax(x.double(), 1)
    loose = Tolerances.preset("cuda-agent")
    assert trivial_output_passes(ref32, ref64, loose) is not None
    trap = zero_trap(ref32, ref64, loose)
    assert trap.informative
    assert not compare_output(0, torch.zeros_like(ref32), ref32, ref64, trap.tol).ok
    assert not compare_output(0, torch.full_like(ref32, 1e-5), ref32, ref64, trap.tol).ok


def test_no_trap_for_ordinary_outputs():
    ref = torch.randn(64, 64, generator=gen())
    assert trivial_output_passes(ref, ref.double(), TOL) is None
    trap = zero_trap(ref, ref.double(), TOL)
    assert trap.tol == TOL and trap.note is None and trap.informative


def test_all_zero_or_constant_reference_is_uninformative():
    zero = zero_trap(torch.zeros(16), None, TOL)
    assert not zero.informative and "all zeros" in zero.note
    const = zero_trap(torch.full((16,), 3.0), None, TOL)
    assert not const.informative and "uninformative" in const.note


@pytest.mark.gpu
def test_cuda_tensors_and_large_outputs():
    a = torch.randn(8192, 8192, device="cuda")
    ref64 = a.double().relu() * 2 + 1
    ref32 = a.relu() * 2 + 1
    out = ref32.clone()
    assert compare_output(0, out, ref32, ref64, TOL).ok
    out[-1, -1] = float("nan")
    check = compare_output(0, out, ref32, ref64, TOL)
    assert not check.ok and "[8191, 8191]" in check.reason
    assert compare_output(0, ref32.cpu(), ref32.cpu(), ref64, TOL).ok  # refs on another device
