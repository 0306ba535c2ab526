"""The scripted demonstration sessions in examples/scale_add_small: they load, every kernel they write
builds with nvcc here; on a GPU `optimize --script` replays the GPU one to a re-verified result, and
without one the host-only twin does (the README's commands), while the GPU one stops at once."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from readme_commands import ROOT as CLONE
from readme_commands import as_argv, readme_command

from cuda_agent.agent.scripted_model import ScriptedModel
from cuda_agent.eval.guards.static import check_candidate_static
from cuda_agent.kernels.build import build_kernels

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "scale_add_small"
DEMO = EXAMPLE / "demo_session.json"
CPU_DEMO = EXAMPLE / "demo_session_cpu.json"


def edits(demo=DEMO):
    doc = json.loads(demo.read_text())
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
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuda_agent.cli",
            "optimize",
            str(EXAMPLE / "model.py"),
            "--script",
            str(DEMO),
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    summary = json.loads(proc.stdout[proc.stdout.index("{") :])
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


def test_the_cpu_twin_is_labelled_scripted_and_writes_only_host_loops(tmp_path):
    """demo_session_cpu.json: the same session's shape, the same model_new.py, and kernels whose
    launcher is the loop (no __global__, no launch): each version builds and passes the static guards."""
    doc = json.loads(CPU_DEMO.read_text())
    assert "SCRIPTED" in doc["about"] and "not model output" in doc["about"] and "needs_gpu" not in doc
    assert ScriptedModel.from_json(CPU_DEMO).responses[-1].tool_calls[0].name == "finish"
    assert dict(edits(CPU_DEMO))["model_new.py"] == dict(edits())["model_new.py"]
    versions = 0
    for path, text in edits(CPU_DEMO):
        target = tmp_path / "cand" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if path.endswith(".cu"):
            assert "<<<" not in text, text
            r = build_kernels(tmp_path / "cand" / "kernels", tmp_path / "cache")
            assert r.ok and r.launchers == ["scale_add"] and r.kernels == [], r.errors  # no __global__ to launch
            versions += 1
    assert versions == 2
    assert not [f for f in check_candidate_static(tmp_path / "cand", task_fp32=True) if f.severity == "fail"]


def without_gpu() -> dict:
    """This machine as one without a GPU, the device left to the command line (as a new user's)."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_AGENT_EVAL__DEVICE"}
    return {**env, "CUDA_VISIBLE_DEVICES": ""}


@pytest.mark.parametrize("device", [["--device", "cpu"], []], ids=["flag", "settings"])
def test_the_gpu_demo_on_the_cpu_stops_at_once_in_one_line_naming_its_twin(tmp_path, device):
    """The README's demo command with --device cpu (or eval.device = cpu from the environment): exit
    code 2, one line on stderr that says its kernels need a GPU and gives the twin's command as the
    README does; nothing on stdout, no run folder."""
    out = tmp_path / "runs"
    env = without_gpu() if device else {**without_gpu(), "CUDA_AGENT_EVAL__DEVICE": "cpu"}
    proc = subprocess.run(
        [*as_argv(readme_command("cuda-agent optimize", "demo_session.json")), *device, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=CLONE,
    )
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "writes kernels that launch on a GPU, and --device cpu runs launchers on the host" in proc.stderr
    assert f"`{readme_command('cuda-agent optimize', 'demo_session_cpu.json')}`" in proc.stderr
    assert not out.exists()


def test_the_cpu_twin_replays_to_a_reverified_result_and_dropin_without_a_gpu(tmp_path):
    """The README's no-GPU demo command: the scripted session runs through the real tools on host
    loops, finishes, and its best version passes re-verification with a report and a drop-in."""
    out = tmp_path / "runs"
    proc = subprocess.run(
        [*as_argv(readme_command("cuda-agent optimize", "demo_session_cpu.json")), "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        env=without_gpu(),
        cwd=CLONE,
    )
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert summary["stop_reason"] == "finished" and summary["verified_reward"] >= 1, summary
    assert Path(summary["report"]).is_file()
    # the drop-in, verified with host loops, runs them in a fresh process and matches the original layer
    check = (
        "import sys, torch; sys.path.insert(0, %r)\n"
        "from dropin import load_layer\n"
        "sys.path.insert(0, %r); import model as m\n"
        "orig = m.Model(); layer = load_layer(original=orig)\n"
        "x, y = m.get_inputs()\n"
        "with torch.no_grad(): assert torch.allclose(layer(x, y), orig(x, y), rtol=1e-6, atol=1e-6)\n"
        "print('dropin ok')\n" % (str(Path(summary["dropin"]).parent), str(EXAMPLE))
    )
    ran = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300, env=without_gpu())
    assert "dropin ok" in ran.stdout, ran.stderr[-2000:]
