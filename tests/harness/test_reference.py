"""The parent's reference: snapshot outside the workspace, float64 truth, determinism check."""

import pytest
import torch

from cuda_agent.eval.reference import Reference, snapshot_task
from cuda_agent.task import load_task

DROPOUT = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(x)

def get_inputs():
    return [torch.randn(256)]

def get_init_inputs():
    return []
"""


def test_snapshot_is_independent_of_later_edits(tmp_path):
    p = tmp_path / "model.py"
    p.write_text(DROPOUT)
    snap = snapshot_task(load_task(str(p)), tmp_path / "snap")
    p.write_text("raise SystemExit('tampered')\n")
    assert snap.path.parent == (tmp_path / "snap").resolve()
    assert Reference(snap, "cpu").model is not None  # still builds from the untouched copy


def test_dropout_task_is_unscorable_with_the_reason(tmp_path):
    p = tmp_path / "model.py"
    p.write_text(DROPOUT)
    ref = Reference(load_task(str(p)), "cpu")
    assert "not deterministic" in ref.determinism_problem(1)
    ref.model.eval()  # without dropout the same task is scorable
    assert ref.determinism_problem(1) is None


def test_float64_reference_and_task_dtype(tmp_path):
    p = tmp_path / "model.py"
    p.write_text(DROPOUT.replace("self.drop(x)", "x.cumsum(0)"))
    ref = Reference(load_task(str(p)), "cpu")
    assert ref.fp32 and ref.dtypes == ["float32"]
    inputs = [torch.randn(256)]
    r32, r64 = ref.outputs(inputs)
    assert r32[0].dtype == torch.float32 and r64[0].dtype == torch.float64
    assert inputs == []  # taken over: one input set on the device at a time (fp32 freed as float64 is made)
    assert torch.allclose(r64[0], r32[0].double(), atol=1e-4)


def test_mutation_check_walks_large_inputs_in_slices():
    from cuda_agent.eval.batch import COMPARE_SLICE, same_bytes

    a = torch.zeros((COMPARE_SLICE // 4) + 5)  # past one slice of bytes
    a[7] = float("nan")
    b = a.clone()
    assert same_bytes(a.view(torch.uint8), b.view(torch.uint8))  # NaN where the fresh draw has NaN is unchanged
    b[-1] = 1.0  # a change in the last, short slice
    assert not same_bytes(a.view(torch.uint8), b.view(torch.uint8))
    with pytest.raises(ValueError, match="not the same storage layout"):
        same_bytes(a.view(torch.uint8), a[:-1].view(torch.uint8))


def test_describe_records_hash_dtypes_and_shapes(tmp_path):
    p = tmp_path / "model.py"
    p.write_text(DROPOUT.replace("self.drop(x)", "x * 2"))
    d = Reference(load_task(str(p)), "cpu").describe()
    assert d["hash"] == load_task(str(p)).source_hash and d["dtypes"] == ["float32"]
    assert d["inputs"] == [{"shape": [256], "dtype": "float32"}] and d["init_inputs"] == []


def test_single_run_builds_and_runs_one_forward(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).parent / "cpu_task"
    env = {**os.environ, "CUDA_AGENT_CACHE": str(tmp_path)}
    env.pop("CUDA_AGENT_KERNELS", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuda_agent.eval.single_run",
            str(here / "model.py"),
            str(here / "honest"),
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "output shapes [(32768,)]" in proc.stdout


def test_the_reference_gives_its_tensors_up_before_it_releases_the_allocators_cache(tmp_path, monkeypatch):
    """release_cached() hands freed blocks back to the GPU, beside which the judge allocates. A name
    still bound to an output (a loop's `a, b`) or to an fp32 input at that moment keeps its block
    held: on the H200 that was 26 GB of the determinism check's through the first input set.
    Counted as the task's tensors alive at each release (a size nothing else here has), by dtype."""
    import gc

    n = 4099
    p = tmp_path / "model.py"
    p.write_text(
        DROPOUT.replace("nn.Dropout(0.5)", "nn.Identity()")
        .replace("self.drop(x)", "self.drop(x) * 2")
        .replace("torch.randn(256)", f"torch.randn({n})")
    )
    ref = Reference(load_task(str(p)), "cpu")
    alive: list[dict] = []

    def release_cached():
        storages: dict[str, set] = {}
        for o in gc.get_objects():
            if isinstance(o, torch.Tensor) and o.numel() == n:
                storages.setdefault(str(o.dtype).removeprefix("torch."), set()).add(o.untyped_storage().data_ptr())
        alive.append({k: len(v) for k, v in storages.items()})

    monkeypatch.setattr(ref, "release_cached", release_cached)
    assert ref.determinism_problem(1) is None
    assert alive == [{}], alive  # both runs' inputs and outputs, and the clones compared: all gone
    inputs = ref.inputs(2)
    ref32, ref64 = ref.outputs(inputs)
    # before the float64 forward: the fp32 output and the float64 input, the fp32 input gone;
    # at the end the two references handed back, the float64 input gone
    assert alive[1:] == [{"float32": 1, "float64": 1}, {"float32": 1, "float64": 1}], alive
    assert [t.dtype for t in (*ref32, *ref64)] == [torch.float32, torch.float64]
