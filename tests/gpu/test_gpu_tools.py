"""On the GPU machine, the model's tools end to end through the Environment: a scripted sequence
(write a kernel, compile, verify, benchmark, profile, improve, verify, benchmark) gives real
verdicts and a real ncu summary; a hanging kernel and an illegal-address kernel come back as
observations and the next tool call works."""

import json
import os
from pathlib import Path

import pytest

from cuda_agent.environment import Environment
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.profiling.ncu import find_ncu
from cuda_agent.task import load_task

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "scale_add_small"
FAULTS = ROOT / "tests" / "gpu_faults"
FAULT_TASK = ROOT / "tests" / "adversarial" / "task.py"
HONEST = ROOT / "tests" / "adversarial" / "honest" / "reordered"


def demo_files():
    """The two kernel versions and model_new.py the scripted demo writes (v1 scalar, v2 float4)."""
    doc = json.loads((EXAMPLE / "demo_session.json").read_text())
    return [
        (c["arguments"]["path"], c["arguments"]["file_text"])
        for r in doc["responses"]
        for c in r["tool_calls"]
        if c["name"] == "edit_file"
    ]


def create(path, text):
    return ("edit_file", {"mode": "create", "path": path, "file_text": text, "overwrite": True})


def log(name, results):
    """Keep the observations where benchmarks/gpu_suite.sh collects results."""
    out = os.environ.get("CUDA_AGENT_RESULTS_DIR")
    text = "\n\n".join(f"### {tool} -> {r.result.status}\n{r.result.observation}" for tool, r in results)
    print(text)
    if out:
        Path(out, name).write_text(text + "\n")


def config(tmp_path, **kw):
    return EvalConfig(cache_dir=tmp_path / "cache", **kw)


def test_scripted_tool_sequence_gives_real_verdicts_and_a_real_profile(tmp_path):
    (k1_path, k1), (mn_path, model_new), (k2_path, k2) = demo_files()
    steps = [
        create(k1_path, k1),
        create(mn_path, model_new),
        ("compile", {}),
        ("verify", {}),
        ("benchmark", {}),
        ("profile", {}),
        create(k2_path, k2),
        ("compile", {}),
        ("verify", {}),
        ("benchmark", {}),
    ]
    with Environment.create(
        load_task(str(EXAMPLE / "model.py")), runs_dir=tmp_path / "runs", eval_config=config(tmp_path)
    ) as env:
        results = [(name, env.step(name, args)) for name, args in steps]
        versions = env.workspace.versions()
    log("tool-sequence.txt", results)
    by = dict(enumerate(r for _, r in results))
    for i in (0, 1, 2, 3, 4, 6, 7, 8, 9):
        assert by[i].result.status == "ok", (steps[i][0], by[i].result.observation)
    assert "scale_add" in by[2].result.observation and "registers" in by[2].result.observation
    assert "status: correct" in by[3].result.observation and by[3].reward >= 1
    for i in (4, 9):  # both timed against eager and torch.compile
        v = by[i].result.verdict
        assert v.timing.median_ms > 0 and v.speedup_vs_eager and v.speedup_vs_compile, v
    assert "rebuilt" in by[7].result.observation  # the improved kernel really recompiled
    if find_ncu() is not None and "not permitted" not in by[5].result.observation:
        assert by[5].result.status == "ok", by[5].result.observation
        (k,) = [k for k in by[5].result.data["kernels"] if "scale_add" in k["name"]]
        assert k["duration_us"] > 0 and k["registers"] and by[5].result.data["roofline"]
    assert [v.status for v in versions] == ["correct"] * 4 and versions[-1].reward >= 1


def test_hang_and_illegal_address_are_observations_and_the_next_call_works(tmp_path):
    relu = "kernels/relu_affine.cu"
    steps = [
        create(relu, (FAULTS / "hang" / relu).read_text()),
        create("model_new.py", (FAULTS / "hang" / "model_new.py").read_text()),
        ("compile", {}),
        ("verify", {}),
        create(relu, (FAULTS / "illegal_address" / relu).read_text()),
        ("compile", {}),
        ("verify", {}),
        ("list_files", {}),
        (
            "edit_file",
            {
                "mode": "create",
                "path": "kernels/affine_then_clamp.cu",
                "overwrite": True,
                "file_text": (HONEST / "kernels" / "affine_then_clamp.cu").read_text(),
            },
        ),
        create("model_new.py", (HONEST / "model_new.py").read_text()),
    ]
    cfg = config(
        tmp_path,
        baselines=[],
        timeout_s=20,
        timing=TimingConfig(warmup_ms=10, min_batches=2, max_batches=3, budget_ms=100),
    )
    with Environment.create(load_task(str(FAULT_TASK)), runs_dir=tmp_path / "runs", eval_config=cfg) as env:
        results = [(name, env.step(name, args)) for name, args in steps]
        # relu_affine.cu (the faulting one) still builds but the honest model_new never calls it
        results.append(("verify", env.step("verify", {})))
    log("tool-faults.txt", results)
    r = [res for _, res in results]
    assert r[3].result.status == "error" and "timeout" in r[3].result.observation, r[3].result.observation
    assert r[6].result.status == "error" and "illegal" in r[6].result.observation.lower(), r[6].result.observation
    assert r[7].result.status == "ok" and "relu_affine.cu" in r[7].result.observation
    assert r[-1].result.status == "ok" and "status: correct" in r[-1].result.observation, r[-1].result.observation
