"""The scripted demonstration session in examples/scale_add_small: it loads, every kernel it writes
builds with nvcc here, and on a GPU `optimize --script` replays it to a re-verified result."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_agent.agent.scripted_model import ScriptedModel
from cuda_agent.eval.guards.static import check_candidate_static
from cuda_agent.kernels.build import build_kernels

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "scale_add_small"
DEMO = EXAMPLE / "demo_session.json"


def edits():
    doc = json.loads(DEMO.read_text())
    for r in doc["responses"]:
        for c in r["tool_calls"]:
            if c["name"] == "edit_file" and c["arguments"].get("mode") == "create":
                yield c["arguments"]["path"], c["arguments"]["file_text"]


def test_demo_is_labelled_scripted_and_loads():
    doc = json.loads(DEMO.read_text())
    assert "SCRIPTED" in doc["about"] and "not model output" in doc["about"]
    model = ScriptedModel.from_json(DEMO)
    assert model.name == "scripted-demo" and model.responses[-1].tool_calls[0].name == "finish"


def test_every_kernel_version_builds_and_model_new_passes_the_static_guards(tmp_path):
    versions = 0
    for path, text in edits():
        target = tmp_path / "cand" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if path.endswith(".cu"):
            r = build_kernels(tmp_path / "cand" / "kernels", tmp_path / "cache")
            assert r.ok and r.launchers == ["scale_add"], r.errors
            versions += 1
    assert versions == 2
    assert not [f for f in check_candidate_static(tmp_path / "cand", task_fp32=True) if f.severity == "fail"]


@pytest.mark.gpu
def test_replay_on_a_gpu_ends_with_a_verified_result_report_and_dropin(tmp_path):
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "cuda_agent.cli", "optimize", str(EXAMPLE / "model.py"),
                           "--script", str(DEMO), "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert summary["stop_reason"] == "finished" and summary["verified_reward"] >= 1
    report = Path(summary["report"]).read_text()
    assert "| 2 |" in report or "v2" in report
    results = os.environ.get("CUDA_AGENT_RESULTS_DIR")
    if results:  # benchmarks/gpu_suite.sh keeps the report
        Path(results, "demo-report.md").write_text(report)
    # the drop-in, imported in a fresh process, matches the original layer
    check = (
        "import sys, torch; sys.path.insert(0, %r)\n"
        "from dropin import load_layer\n"
        "sys.path.insert(0, %r); import model as m\n"
        "orig = m.Model().cuda(); layer = load_layer(original=orig)\n"
        "x, y = [t.cuda() for t in m.get_inputs()]\n"
        "with torch.no_grad(): assert torch.allclose(layer(x, y), orig(x, y), rtol=1e-6, atol=1e-6)\n"
        "print('dropin ok')\n" % (str(Path(summary["dropin"]).parent), str(EXAMPLE))
    )
    ran = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert "dropin ok" in ran.stdout, ran.stderr[-2000:]
