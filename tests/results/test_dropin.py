"""The drop-in folder: imported in a fresh process with torch alone, it matches the reference on
fresh inputs and refuses, with a clear error, the calls it was not verified for."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from cuda_agent.eval.verdict import Verdict
from cuda_agent.results.dropin import write_dropin
from cuda_agent.run_folder import RunFolder

# Runs in a fresh interpreter: cuda_agent cannot be imported there, so any use of it fails loudly.
PROBE = r"""
import importlib.util, json, sys
class NoCudaAgent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "cuda_agent":
            raise ImportError("the drop-in imported cuda_agent")
sys.meta_path.insert(0, NoCudaAgent())
sys.path.insert(0, sys.argv[1])
import torch
from my_kernels import Layer, load_layer

spec = importlib.util.spec_from_file_location("task", sys.argv[2])
task = importlib.util.module_from_spec(spec); spec.loader.exec_module(task)
ref = task.Model(*task.get_init_inputs())
layer = load_layer(original=ref)
torch.manual_seed(1234)
x, y = torch.randn(task.N), torch.randn(task.N)
out = {"modules": sorted(m for m in sys.modules if m.startswith("cuda_agent"))}
with torch.no_grad():
    got = layer(x, y)
    out["max_err"] = (got - ref(x, y)).abs().max().item()
    out["keyword_call_ok"] = torch.equal(layer(x, y=y), got)

def error(fn):
    try:
        with torch.no_grad():
            fn()
    except (ValueError, RuntimeError) as e:
        return [type(e).__name__, str(e)]
    return None

out["shape"] = error(lambda: layer(x[:100], y[:100]))
out["dtype"] = error(lambda: layer(x.double(), y))
out["strided"] = error(lambda: layer(torch.randn(2 * task.N)[::2], y))
out["count"] = error(lambda: layer(x))
out["init"] = error(lambda: Layer(3.0))
xg = x.clone().requires_grad_()
try:
    layer(xg, y)
    out["grad"] = None
except RuntimeError as e:
    out["grad"] = ["RuntimeError", str(e)]
with torch.no_grad():
    out["grad_off_ok"] = torch.equal(layer(xg, y), got)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe(finalized, cpu_task, tmp_path_factory) -> dict:
    """What the probe saw, with the drop-in copied and renamed (nothing may point back at the run)."""
    moved = tmp_path_factory.mktemp("elsewhere") / "my_kernels"
    shutil.copytree(finalized.dropin, moved)
    env = {**os.environ, "CUDA_AGENT_HOST_ONLY": "1"}
    env.pop("CUDA_AGENT_KERNELS", None)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(moved.parent), str(cpu_task / "model.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=moved.parent,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_folder_holds_the_verified_version_and_its_prebuilt_library(finalized):
    d = finalized.dropin
    for name in (
        "__init__.py",
        "layer.py",
        "model_new.py",
        "kernels/scale_add.cu",
        "kernel_runtime.py",
        "build/launchers.json",
        "verified.json",
        "init_inputs.pt",
        "README.md",
    ):
        assert (d / name).is_file(), name
    spec = json.loads((d / "verified.json").read_text())
    assert len(list((d / "build").glob("libkernels-*.so"))) == 1
    assert spec["commit"] == finalized.reverification.verified.version.sha and spec["input_sets"] == 10
    assert spec["device"] == "cpu" and spec["inputs"][1]["name"] == "y"


def test_fresh_process_with_torch_alone_matches_the_reference(probe):
    assert probe["modules"] == []
    assert probe["max_err"] <= 1e-6 and probe["keyword_call_ok"]


def test_unverified_calls_raise_one_clear_error_each(probe):
    kind, msg = probe["shape"]
    assert kind == "ValueError" and "input 'x'" in msg and "[32768]" in msg and "[100]" in msg
    kind, msg = probe["dtype"]
    assert kind == "ValueError" and "input 'x'" in msg and "float32" in msg and "float64" in msg
    kind, msg = probe["strided"]
    assert kind == "ValueError" and "contiguous" in msg and "[2]" in msg and ".contiguous()" in msg
    kind, msg = probe["count"]
    assert kind == "ValueError" and "2 inputs (x, y)" in msg and "given 1" in msg
    kind, msg = probe["init"]
    assert kind == "ValueError" and "2.0" in msg and "3.0" in msg
    assert all("\n" not in probe[k][1] for k in ("shape", "dtype", "strided", "count", "init"))


def test_autograd_is_refused_plainly(probe):
    kind, msg = probe["grad"]
    assert kind == "RuntimeError" and "input 'x' requires grad" in msg
    assert "forward-only: wrap the call in torch.no_grad() or use the original layer for training" in msg
    assert probe["grad_off_ok"]


def test_readme_says_how_to_use_it_and_what_was_verified(finalized, session):
    text = (finalized.dropin / "README.md").read_text()
    task = session.env.workspace.record.task
    assert "from dropin import load_layer" in text and "load_layer(original=my_layer)" in text
    assert task.source_hash in text and "10 fresh" in text and "Forward-only" in text
    assert "float64 reference" in text and "vs eager" in text
    assert f"{finalized.verified.speedup_vs_eager:.2f}x" in text


def test_only_a_verified_version_becomes_a_drop_in_and_rewriting_replaces_it(finalized, session):
    rv = finalized.reverification
    ws, sha = session.env.workspace, rv.verified.version.sha
    with pytest.raises(ValueError, match="did not pass re-verification"):
        write_dropin(RunFolder(session.run_dir), ws, sha, Verdict(status="incorrect"), rv.task)
    again = write_dropin(
        RunFolder(session.run_dir), ws, sha, rv.verdict, rv.task, cache_dir=session.env.eval_config.cache_dir
    )
    assert again == finalized.dropin and (again / "layer.py").is_file()
    assert not list(session.run_dir.glob(".dropin-*"))
