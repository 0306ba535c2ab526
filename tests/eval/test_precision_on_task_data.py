"""Precision on the task's own data (issue 25, item 8): TF32/fp16 operands and dropped terms are a
`precision` finding on all-positive, zero-mean and offset inputs alike; honest fp32 in any order is not."""

import pytest
import torch
import torch.nn.functional as F

from cuda_agent.eval.compare import compare_output
from cuda_agent.eval.downgrade_probe import perturbation, round_mantissa, rounded_forward
from cuda_agent.eval.precision import downgrade_signature, precision_finding
from cuda_agent.eval.reference import Reference
from cuda_agent.eval.tolerance import Tolerances
from cuda_agent.task import load_task

TOL = Tolerances()


def draw(dist, *shape, g):
    if dist == "rand":
        return torch.rand(*shape, generator=g)
    if dist == "randn":
        return torch.randn(*shape, generator=g)
    return torch.randn(*shape, generator=g) * 3 + 1000  # large magnitude, far from zero mean


def truncate_tf32(t):
    return (t.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def sequential(a, b):
    """One fp32 FMA per term, in K order: what a one-thread-per-output kernel does."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        acc = torch.addcmul(acc, a[:, k : k + 1], b[k : k + 1, :])
    return acc


def finding(out, ref32, ref64, probe):
    check = compare_output(0, out, ref32, ref64, TOL)
    return precision_finding(check, TOL, task_fp32=True, signature=downgrade_signature(out, ref64, probe))


def gemm_case(dist, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    a, b = draw(dist, 96, k, g=g), draw(dist, k, 80, g=g)
    ref64 = a.double() @ b.double()
    low, rounded = rounded_forward(lambda: [a.double() @ b.double()])
    assert rounded == 1
    return a, b, a @ b, ref64, perturbation(low[0], ref64)


@pytest.mark.parametrize("dist", ["rand", "randn", "offset"])
@pytest.mark.parametrize("k", [64, 256, 1024, 4096])
def test_honest_fp32_gemm_in_any_order_has_no_finding(dist, k):
    a, b, ref32, ref64, probe = gemm_case(dist, k)
    q = k // 4
    honest = {
        "reference": ref32,
        "split-K": sum(a[:, i : i + q] @ b[i : i + q] for i in range(0, k, q)),
        "transposed": (b.t().contiguous() @ a.t().contiguous()).t(),
        "more exact": ref64.float(),
        "column by column": torch.stack([a @ b[:, j] for j in range(b.shape[1])], 1),
    }
    if k <= 1024:
        honest["sequential FMA"] = sequential(a, b)
    for name, out in honest.items():
        assert finding(out, ref32, ref64, probe) is None, name


@pytest.mark.parametrize("dist", ["rand", "randn", "offset"])
@pytest.mark.parametrize("k", [64, 256, 1024, 4096])
def test_tf32_fp16_operands_and_dropped_terms_are_caught(dist, k):
    a, b, ref32, ref64, probe = gemm_case(dist, k)
    downgraded = {
        "tf32 round-to-nearest": round_mantissa(a) @ round_mantissa(b),
        "tf32 truncated": truncate_tf32(a) @ truncate_tf32(b),
        "fp16 operands": a.half().float() @ b.half().float(),
        "one operand tf32": round_mantissa(a) @ b,
        "a dropped term": a[:, :-1] @ b[:-1],
    }
    if dist == "randn" or k <= 1024:  # bf16: 8x fp16's error, normwise above the budget there
        downgraded["bf16 operands"] = a.bfloat16().float() @ b.bfloat16().float()
    for name, out in downgraded.items():
        f = finding(out, ref32, ref64, probe)
        assert f is not None and f.guard == "precision" and f.severity == "fail", name


def test_on_positive_data_the_normwise_budget_alone_lets_tf32_through():
    """Why the signature exists: the attack seen, TF32 on torch.rand at K=4096."""
    a, b, ref32, ref64, probe = gemm_case("rand", 4096)
    tf32 = round_mantissa(a) @ round_mantissa(b)
    check = compare_output(0, tf32, ref32, ref64, TOL)
    assert check.ok and precision_finding(check, TOL, task_fp32=True) is None
    f = precision_finding(check, TOL, task_fp32=True, signature=downgrade_signature(tf32, ref64, probe))
    assert f is not None and "share 1.00" in f.message and "CUBLAS_COMPUTE_32F" in f.message
    assert (
        precision_finding(
            check, TOL, task_fp32=True, allow_precision=True, signature=downgrade_signature(tf32, ref64, probe)
        ).severity
        == "warn"
    )
    assert precision_finding(check, TOL, task_fp32=False, signature=downgrade_signature(tf32, ref64, probe)) is None


@pytest.mark.parametrize("dist", ["rand", "randn", "offset"])
def test_convolution_honest_im2col_passes_and_tf32_is_caught(dist):
    g = torch.Generator().manual_seed(3)
    x, w, bias = draw(dist, 4, 16, 20, 20, g=g), draw(dist, 24, 16, 3, 3, g=g), draw(dist, 24, g=g)

    def conv64():
        return [F.conv2d(x.double(), w.double(), bias.double(), padding=1)]

    ref64 = conv64()[0]
    low, _ = rounded_forward(conv64)
    probe = perturbation(low[0], ref64)
    ref32 = F.conv2d(x, w, bias, padding=1)
    im2col = (w.view(24, -1) @ F.unfold(x, 3, padding=1)).view(4, 24, 20, 20) + bias.view(1, -1, 1, 1)
    assert finding(ref32, ref32, ref64, probe) is None
    assert finding(im2col, ref32, ref64, probe) is None
    tf32 = F.conv2d(round_mantissa(x), round_mantissa(w), bias, padding=1)
    assert finding(tf32, ref32, ref64, probe) is not None


def test_honest_reductions_and_softmax_after_a_gemm_pass():
    g = torch.Generator().manual_seed(4)
    x, w = torch.rand(64, 512, generator=g), torch.rand(512, 128, generator=g) / 16

    def model64():
        return [torch.softmax(x.double() @ w.double(), 1)]

    ref64 = model64()[0]
    low, _ = rounded_forward(model64)
    probe = perturbation(low[0], ref64)
    logits = x @ w
    m = logits.max(1, keepdim=True).values
    online = torch.exp(logits - m) / torch.exp(logits - m).sum(1, keepdim=True)  # another reduction order
    assert finding(online, torch.softmax(logits, 1), ref64, probe) is None
    tf32 = torch.softmax(round_mantissa(x) @ round_mantissa(w), 1)
    assert finding(tf32, torch.softmax(logits, 1), ref64, probe) is not None


def test_round_mantissa_keeps_non_finite_values_and_ties_away():
    t = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0 + 2**-11, -(1.0 + 2**-11), 0.0])
    r = round_mantissa(t)
    assert torch.isnan(r[0]) and r[1] == float("inf") and r[2] == -float("inf")
    assert r[3] == 1.0 + 2**-10 and r[4] == -(1.0 + 2**-10) and r[5] == 0.0
    assert torch.equal(round_mantissa(t.double())[3:], r[3:].double())


def test_signature_needs_evidence_a_single_element_proves_nothing():
    ref64 = torch.tensor([1.0], dtype=torch.float64)
    sig = downgrade_signature(torch.tensor([1.001]), ref64, torch.tensor([0.001]))
    assert sig is not None and abs(sig.z) < TOL.downgrade_z
    assert downgrade_signature(torch.ones(4), torch.ones(4, dtype=torch.float64), torch.zeros(4)) is None


LINEAR_BN = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(256, 64)
        self.bn = nn.BatchNorm1d(64)

    def forward(self, x):
        return self.bn(self.fc(x))

def get_inputs():
    return [torch.rand(32, 256)]

def get_init_inputs():
    return []
"""

ELEMENTWISE = LINEAR_BN.replace("return self.bn(self.fc(x))", "return torch.relu(x) * 2")


def test_reference_probe_for_a_gemm_task_and_none_without_one(tmp_path):
    p = tmp_path / "model.py"
    p.write_text(LINEAR_BN)
    ref = Reference(load_task(str(p)), "cpu")
    ref32, ref64 = ref.outputs(ref.inputs(7))
    before = {k: v.clone() for k, v in ref.model64.named_buffers()}
    probe = ref.downgrade_probe(7, ref64)
    assert probe is not None and probe[0].shape == ref64[0].shape and bool(probe[0].any())
    assert all(torch.equal(before[k], v) for k, v in ref.model64.named_buffers())  # running stats unmoved
    tf32 = ref32[0] + probe[0]  # what TF32 operands would have returned, plus fp32's own rounding
    check = compare_output(0, tf32, ref32[0], ref64[0], TOL)
    sig = downgrade_signature(tf32, ref64[0], probe[0])
    assert precision_finding(check, TOL, task_fp32=True, signature=sig) is not None
    honest = compare_output(0, ref32[0], ref32[0], ref64[0], TOL)
    sig = downgrade_signature(ref32[0], ref64[0], probe[0])
    assert precision_finding(honest, TOL, task_fp32=True, signature=sig) is None

    p.write_text(ELEMENTWISE)
    ref = Reference(load_task(str(p)), "cpu")
    _, ref64 = ref.outputs(ref.inputs(7))
    assert ref.downgrade_probe(7, ref64) is None and not ref.probe_rounds
    assert ref.downgrade_probe(8, ref64) is None  # not run again for a task with nothing to round


@pytest.mark.gpu
def test_cublas_tf32_on_positive_data_is_caught_on_the_gpu():
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.rand(1024, 4096, device="cuda", generator=g)
    b = torch.rand(4096, 1024, device="cuda", generator=g)
    ref64 = a.double() @ b.double()
    low, _ = rounded_forward(lambda: [a.double() @ b.double()])
    probe = perturbation(low[0], ref64)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref32 = a @ b
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = a @ b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    assert finding(ref32, ref32, ref64, probe) is None
    assert finding(tf32, ref32, ref64, probe) is not None
