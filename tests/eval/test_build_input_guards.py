"""The source guards and the verdict cover every file nvcc read, whatever its name: a file whose
suffix the guards did not know (`impl.inc`, `impl.txt`, none), included through a macro, hid
forbidden code from them; a header a macro includes was missing from the cache key, so a wrong
edit to it was scored on the previous object."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from cuda_agent.eval.guards.native import audit_library
from cuda_agent.eval.guards.static import check_build_inputs, check_candidate_static
from cuda_agent.jail import jail_problem
from cuda_agent.kernels.build import build_kernels
from cuda_agent.kernels.toolkit import ToolkitError, find_nvcc

TASK = Path(__file__).parents[1] / "harness" / "cpu_task"
SCALE_ADD = """\
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#define STR(x) #x
#define XSTR(x) STR(x)
#define IMPL XSTR(NAME)
#include IMPL
extern "C" void scale_add(const float* x, const float* y, float* out, float alpha, int64_t n,
                          cudaStream_t stream) {
    for (int64_t i = 0; i < n; ++i) out[i] = combine(alpha, x[i], y[i]);
}
"""
HONEST = "static inline float combine(float a, float x, float y) { return a * x + y; }\n"
WRONG = "static inline float combine(float a, float x, float y) { return a * x - y; }\n"
# what static_cu.py rejects in a .cu: an environment read (forbidden_call) and a stream of its own
# (side_stream, as in tests/adversarial/side_stream_cu)
HIDDEN = {
    "forbidden_call": "static inline float combine(float a, float x, float y) {\n"
    '  return getenv("FAST") ? x : a * x + y;\n}\n',
    "side_stream": "static inline float combine(float a, float x, float y) {\n"
    "  static cudaStream_t s; if (!s) cudaStreamCreate(&s);\n  return a * x + y;\n}\n",
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    try:
        find_nvcc()
    except ToolkitError as exc:
        pytest.skip(str(exc))
    return tmp_path_factory.mktemp("cache")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def candidate(root: Path, name: str, impl: str) -> Path:
    """The CPU task's honest candidate, its arithmetic moved into `name`, included through a macro."""
    cand = root / "cand"
    shutil.copytree(TASK / "honest", cand, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    (cand / "kernels" / "scale_add.cu").write_text(SCALE_ADD.replace("XSTR(NAME)", f"XSTR({name})"))
    (cand / "kernels" / name).parent.mkdir(parents=True, exist_ok=True)
    (cand / "kernels" / name).write_text(impl)
    return cand


@pytest.mark.parametrize("name", ["impl.inc", "impl", "detail/impl.txt"])
@pytest.mark.parametrize("guard", sorted(HIDDEN))
def test_forbidden_code_in_a_file_of_any_name_is_found_after_the_build(cache, tmp_path, name, guard):
    cand = candidate(tmp_path, name, HIDDEN[guard])
    before = check_candidate_static(cand, task_fp32=True)
    assert not [f for f in before if f.where.startswith(f"kernels/{name}")]  # a suffix the walk skips
    built = build_kernels(cand / "kernels", cache)
    assert built.ok, built.errors
    found = check_build_inputs(cand, built.inputs, task_fp32=True)
    shown = [(f.guard, f.severity, f.where.split(":")[0]) for f in found]
    assert shown == [(guard, "fail", f"kernels/{name}")]


def test_honest_code_in_such_a_file_passes_every_guard(cache, tmp_path):
    cand = candidate(tmp_path, "impl.inc", HONEST)
    built = build_kernels(cand / "kernels", cache)
    assert built.ok, built.errors
    assert check_candidate_static(cand, task_fp32=True) == []
    assert check_build_inputs(cand, built.inputs, task_fp32=True) == []
    assert audit_library(built) == []


def test_files_the_walk_scanned_are_not_scanned_twice(cache, tmp_path):
    cand = candidate(tmp_path, "impl.cuh", HIDDEN["forbidden_call"])
    built = build_kernels(cand / "kernels", cache)
    assert built.ok, built.errors
    assert [f.guard for f in check_candidate_static(cand, task_fp32=True)] == ["forbidden_call"]
    assert check_build_inputs(cand, built.inputs, task_fp32=True) == []


def test_a_qualifier_macro_defined_again_in_a_file_the_walk_skipped_is_a_finding(cache, tmp_path):
    """kernels/ reads `DI` as __device__, so asm in a DI function is device code; a file of another suffix
    that makes DI __host__ before that function would put the asm in host code unseen (an operand, so no
    compiler barrier; valid as PTX and as x86, so it builds either way)."""
    cand = candidate(tmp_path, "impl.inc", "#undef DI\n#define DI __host__\n" + HONEST)
    (cand / "kernels" / "qual.cuh").write_text("#define DI __device__\n")
    source = (cand / "kernels" / "scale_add.cu").read_text()
    (cand / "kernels" / "scale_add.cu").write_text(
        '#include "qual.cuh"\n' + source + 'DI int ident(int x) { asm volatile("" : "+r"(x)); return x; }\n'
    )
    assert check_candidate_static(cand, task_fp32=True) == []  # DI reads as __device__ in kernels/' sources
    built = build_kernels(cand / "kernels", cache)
    assert built.ok, built.errors
    found = check_build_inputs(cand, built.inputs, task_fp32=True)
    assert [(f.guard, f.where) for f in found] == [("forbidden_call", "kernels/impl.inc")]
    assert "defines DI again" in found[0].message


def test_a_file_read_outside_the_candidate_is_scanned_by_its_absolute_name(tmp_path):
    outside = tmp_path / "elsewhere.txt"
    outside.write_text(HIDDEN["forbidden_call"])
    (tmp_path / "cand").mkdir()
    found = check_build_inputs(tmp_path / "cand", {str(outside): sha(outside)}, task_fp32=True)
    assert [(f.guard, f.where.split(":")[0]) for f in found] == [("forbidden_call", str(outside))]


def test_a_file_changed_after_the_build_read_it_is_a_finding(cache, tmp_path):
    """What the guards scan must be what nvcc compiled: an edit between the two (honest bytes for
    the guards, hostile ones for nvcc) is caught, a file removed too."""
    cand = candidate(tmp_path, "impl.inc", HIDDEN["forbidden_call"])
    built = build_kernels(cand / "kernels", cache)
    assert built.ok, built.errors
    (cand / "kernels" / "impl.inc").write_text(HONEST)
    found = check_build_inputs(cand, built.inputs, task_fp32=True)
    assert [(f.guard, f.where) for f in found] == [("forbidden_call", "kernels/impl.inc")]
    assert "changed or went away" in found[0].message
    (cand / "kernels" / "impl.inc").unlink()
    assert [f.where for f in check_build_inputs(cand, built.inputs, task_fp32=True)] == ["kernels/impl.inc"]


def test_a_constant_declared_in_a_macro_included_file_is_not_state(cache, tmp_path):
    """The native audit tells a `__constant__` shadow from state by reading the declarations: in
    every file the compile read, not only the ones a literal #include names."""
    table = "__constant__ float coeffs[2] = {2.0f, 1.0f};\n" + HONEST
    cand = candidate(tmp_path, "table.inc", table)
    (cand / "kernels" / "scale_add.cu").write_text(
        (cand / "kernels" / "scale_add.cu").read_text()
        + ("__global__ void scale_add_kernel(float* y) { y[threadIdx.x] *= coeffs[0]; }\n")
    )
    built = build_kernels(cand / "kernels", cache)
    assert built.ok, built.errors
    assert audit_library(built) == []


# -- the verdict ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def evaluate(tmp_path_factory):
    if jail_problem() is not None:
        pytest.skip(str(jail_problem()))
    from cuda_agent.eval.evaluator import Evaluator
    from cuda_agent.eval.settings import EvalConfig
    from cuda_agent.task import load_task

    cfg = EvalConfig(device="cpu", n_sets=1, baselines=[], timeout_s=60, cache_dir=tmp_path_factory.mktemp("cache"))
    with Evaluator(load_task(str(TASK / "model.py")), cfg, ahead="none") as ev:
        yield ev.evaluate


def test_a_wrong_edit_to_a_macro_included_header_is_judged_on_the_new_object(evaluate, tmp_path):
    cand = candidate(tmp_path, "impl.h", HONEST)
    first = evaluate(cand)
    assert first.status == "correct", first.error
    (cand / "kernels" / "impl.h").write_text(WRONG)
    assert evaluate(cand).status == "incorrect"


def test_forbidden_code_hidden_in_an_inc_file_is_a_guard_violation(evaluate, tmp_path):
    v = evaluate(candidate(tmp_path, "impl.inc", HIDDEN["forbidden_call"]))
    assert v.status == "guard_violation" and v.reward == -1
    # the source finding names the file; the native audit also sees getenv in the object
    assert ("forbidden_call", "kernels/impl.inc:2") in [(f.guard, f.where) for f in v.failing_findings]
