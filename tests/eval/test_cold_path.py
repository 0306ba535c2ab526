"""A candidate the static guards reject gets its verdict before torch, CUDA or the task start:
`cuda-agent eval` then never imports torch (the cold path of a hack is a second, not a worker's
start-up)."""

import json
import subprocess
import sys
from pathlib import Path

ADV = Path(__file__).parents[1] / "adversarial"


def test_a_statically_rejected_candidate_is_judged_without_importing_torch():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "cuda_agent.cli", "eval", str(ADV / "task.py"),
                           "--candidate", str(ADV / "triton_import"), "--device", "cpu", "--json"],
                          capture_output=True, text=True, timeout=120)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["verdict"]["status"] == "guard_violation" and out["verdict"]["reward"] == -1
    assert "import_not_allowed" in {f["guard"] for f in out["verdict"]["findings"]}
    assert "before the task was loaded" in out["verdict"]["notes"][0]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "cuda_agent.eval.evaluator" not in imported


def test_a_candidate_the_static_guards_pass_goes_on_to_the_evaluator():
    """torch_in_forward passes the static guards (its torch call is found when forward is recorded)."""
    proc = subprocess.run([sys.executable, "-m", "cuda_agent.cli", "eval", str(ADV / "task.py"), "--candidate",
                           str(ADV / "torch_in_forward"), "--device", "cpu", "--no-compile-baseline", "--json"],
                          capture_output=True, text=True, timeout=300)
    v = json.loads(proc.stdout)["verdict"]
    assert v["status"] == "guard_violation" and "aten_in_forward" in {f["guard"] for f in v["findings"]}
    assert not any("before the task was loaded" in n for n in v["notes"])
