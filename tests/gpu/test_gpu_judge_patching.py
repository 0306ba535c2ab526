"""On the GPU: the review's Python attacks on the judge, with the static guard switched off, against
a real CUDA kernel (tests/adversarial's task): the process split alone holds, and the agent's
process survives a kill from the candidate. Then what native code could do, with the library audit
off too: event times that read low (the parent's clock), a native thread (counted from /proc); an
agent killed with -9 mid-evaluation leaves nothing behind; and a cuBLAS candidate links, passes the
audit and is judged correct."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hostile import KILLS, PATCHES, hostile_copy, judge_clock_reads_low

from cuda_agent.eval import checks
from cuda_agent.eval import evaluator as evaluator_mod
from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.task import load_task

pytestmark = pytest.mark.gpu
ADV = Path(__file__).resolve().parents[1] / "adversarial"
HONEST = ADV / "honest" / "elementwise"
GEMM = Path(__file__).resolve().parents[2] / "examples" / "gemm_bias_relu"
CUBLAS = Path(__file__).resolve().parent / "cublas_candidate"


@pytest.fixture(scope="module")
def ev(tmp_path_factory):
    cfg = EvalConfig(
        cache_dir=tmp_path_factory.mktemp("patch"),
        baselines=["eager"],
        timeout_s=60,
        timing=TimingConfig(warmup_ms=10, min_batches=2, max_batches=3, budget_ms=300),
    )
    with Evaluator(load_task(str(ADV / "task.py")), cfg) as e:
        yield e


@pytest.fixture()
def no_static_guard(monkeypatch):
    monkeypatch.setattr(evaluator_mod, "check_candidate_static", lambda *a, **k: [])


def test_torch_add_with_patched_harness_is_rejected(ev, tmp_path, no_static_guard):
    cand = hostile_copy(HONEST, tmp_path / "c", PATCHES, "        return torch.relu(x) * 2 + 1")
    v = ev.evaluate(cand)
    assert v.status == "guard_violation" and v.reward == -1
    assert {"aten_in_forward", "no_kernel"} <= {f.guard for f in v.failing_findings}


def test_patched_clocks_do_not_move_the_timing(ev, tmp_path, no_static_guard):
    honest = ev.evaluate(HONEST)
    v = ev.evaluate(hostile_copy(HONEST, tmp_path / "c", PATCHES))
    assert honest.status == v.status == "correct", (v.error, v.findings)
    assert 0.5 < v.timing.median_ms / honest.timing.median_ms < 2.0  # the same kernel, timed the same


def test_kill_from_the_candidate_reaches_no_process_of_ours(ev, tmp_path, no_static_guard):
    me = os.getpid()
    v = ev.evaluate(hostile_copy(HONEST, tmp_path / "c", KILLS))
    assert os.getpid() == me and v.status in ("correct", "runtime_error")
    assert ev.evaluate(HONEST).status == "correct"


@pytest.fixture(scope="module")
def gemm_ev(tmp_path_factory):
    cfg = EvalConfig(
        cache_dir=tmp_path_factory.mktemp("gemm"),
        baselines=["eager"],
        timeout_s=120,
        timing=TimingConfig(warmup_ms=20, min_batches=2, max_batches=3, budget_ms=300),
    )
    with Evaluator(load_task(str(GEMM / "model.py")), cfg) as e:
        yield e


def test_cublas_candidate_links_passes_the_audit_and_is_correct(gemm_ev):
    """SKILL.md allows cuBLAS: the symbol allowlist, the static-state rule (a handle in a static)
    and the jailed judge must all let an honest one through, timed like any kernel."""
    v = gemm_ev.evaluate(CUBLAS)
    assert v.status == "correct" and v.reward >= 1, (v.status, v.error, v.findings)
    assert not v.failing_findings, v.findings
    assert v.timing is not None and v.timing.median_ms > 0


def test_event_times_that_read_low_are_caught_by_the_parents_clock(gemm_ev, monkeypatch):
    """As if native code in the judge had moved its clocks: every time it reports for the measured
    loop is a thousandth of the truth. The parent timed that loop itself: `timing_mismatch`."""
    judge_clock_reads_low(monkeypatch)
    v = gemm_ev.evaluate(GEMM / "candidate")  # ~0.9 ms a call: the lie is far above any noise
    assert v.status == "guard_violation", (v.status, v.error, v.findings)
    assert "timing_mismatch" in {f.guard for f in v.failing_findings}, v.findings


def _native(tmp_path: Path, monkeypatch, head: str, first: str) -> Path:
    """The honest elementwise candidate with the library audit off, `head` after its includes and
    `first` at the start of its launcher."""
    monkeypatch.setattr(checks, "audit_native", lambda *a, **k: [])
    cand = hostile_copy(HONEST, tmp_path / "c", "")
    cu = cand / "kernels" / "relu_affine.cu"
    src = cu.read_text().replace("#include <cstdint>", "#include <cstdint>\n" + head)
    cu.write_text(src.replace("    if (n <= 0) return;", first + "    if (n <= 0) return;"))
    return cand


def test_a_native_thread_is_counted_from_outside(ev, tmp_path, no_static_guard, monkeypatch):
    """Source guard and library audit both off: a launcher that leaves a native thread in the judge
    is called side work, from the judge's thread count in /proc."""
    cand = _native(
        tmp_path,
        monkeypatch,
        "#include <pthread.h>\n#include <unistd.h>\nstatic void* idle(void*) { sleep(60); return 0; }",
        "    pthread_t t;\n    if (pthread_create(&t, 0, idle, 0) == 0) pthread_detach(t);\n",
    )
    v = ev.evaluate(cand)
    assert v.status == "guard_violation", (v.status, v.error, v.findings)
    assert any(f.guard == "side_stream" and "thread" in f.message for f in v.failing_findings), v.findings


def test_the_agent_killed_with_9_mid_evaluation_leaves_nothing_on_the_gpu(tmp_path):
    """A warm GPU Evaluator (spare recorders and judges holding CUDA contexts) killed with -9 in the
    middle of an evaluation: no evaluation process lives on and /dev/shm holds nothing of it."""
    from procs import kill_agent_mid_evaluation

    config = f"baselines=[], n_sets=20, timeout_s=120, cache_dir=Path({str(tmp_path / 'cache')!r})"
    alive, shm_left = kill_agent_mid_evaluation(
        GEMM / "model.py", GEMM / "candidate", config, tmp_path / "started", into_s=4.0
    )
    assert not alive, f"left behind after kill -9 of the agent: {alive}"
    assert not shm_left, shm_left


def test_calls_cheaper_in_a_batch_than_alone_are_flagged(ev, tmp_path, no_static_guard, monkeypatch):
    """Library audit off: a launcher whose first call of a batch (the first after a pause on the
    host: a batch's calls are launched microseconds apart, batches are not) spins 2 ms on the GPU,
    and whose later calls do only the work: the signature of a batch computed ahead of its turn or
    side by side. The parent's batches of one call catch it."""
    cand = _native(
        tmp_path,
        monkeypatch,
        "#include <chrono>\n"
        "__global__ void spin(long long cycles) { long long t = clock64(); while (clock64() - t < cycles) {} }\n"
        "static std::chrono::steady_clock::time_point last;",
        "    auto now = std::chrono::steady_clock::now();\n"
        "    if (now - last > std::chrono::microseconds(300)) spin<<<1, 1, 0, stream>>>(4000000LL);\n"
        "    last = now;\n",
    )
    v = ev.evaluate(cand)
    assert v.reward == -1 and "calls_overlap" in {f.guard for f in v.failing_findings}, (v.status, v.findings)
    honest = ev.evaluate(HONEST)
    assert honest.correct and "calls_overlap" not in {f.guard for f in honest.findings}, honest.findings
