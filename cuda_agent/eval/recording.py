"""What forward does, written down by the recorder as a plan and checked here (plan.py).

The recorder imports model_new.py; every plan it returns is checked against the task's inputs,
parameters and memory budget before a judge may replay it.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from cuda_agent.eval import checks
from cuda_agent.eval.channel import ChildError, JailedChild
from cuda_agent.eval.dynamic_guards import judge_aten
from cuda_agent.eval.plan import Plan, check_plan, describe, tensor_nbytes
from cuda_agent.eval.verdict import Finding, Verdict
from cuda_agent.untrusted_files import SOURCE_CAP, read_text

if TYPE_CHECKING:
    from cuda_agent.eval.evaluator import Evaluator


def load_recorder(ev: Evaluator, recorder: JailedChild, candidate_dir: Path, spec: dict, verdict: Verdict) -> bool:
    try:  # the candidate's file, read as untrusted_files says (a FIFO or a link there is not opened)
        source = read_text(candidate_dir / "model_new.py", root=candidate_dir, limit=SOURCE_CAP, shown="model_new.py")
    except OSError as e:
        verdict.status, verdict.error = "error", str(e)
        return False
    resp = recorder.request({
        "op": "load", "source": source, "spec": spec,
        "init_inputs": [describe(x) for x in ev.ref.init_inputs], "init_seed": ev.cfg.init_seed,
        "state": sorted(ev.ref.state_dict)}, ev.cfg.timeout_s)
    if not resp.get("ok"):
        verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
    return bool(resp.get("ok"))


def record_only(ev: Evaluator, candidate_dir: Path, verdict: Verdict) -> None:
    """Record one input set without judging it: names the torch compute forward did instead of kernels."""
    recorder = ev.spares.take("recorder")
    try:
        if load_recorder(ev, recorder, candidate_dir, {}, verdict):
            inputs = ev.ref.inputs(secrets.randbits(31))
            record_plan(ev, recorder, [describe(x) for x in inputs], {}, verdict)
    except ChildError as e:
        verdict.notes.append(f"forward could not be recorded: {e}")
    finally:
        recorder.kill()


def record_plan(ev: Evaluator, recorder: JailedChild, described: list, spec: dict, verdict: Verdict) -> dict | None:
    """Record forward on one input set's layout (`described`); the plan once checked, or None with
    the verdict saying why. Torch compute is a problem like any other: a replay would leave it out."""
    resp = recorder.request({"op": "record", "inputs": described}, ev.cfg.timeout_s)
    if resp.get("plan") is None:
        verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
        return None
    problems = [Finding(guard=g, message=m) for g, m in resp.get("problems", [])]
    problems += judge_aten(resp.get("compute", []))
    foreign = [d for d in resp.get("devices", []) if d != ev.device.split(":")[0]]
    if foreign:
        problems.append(Finding(guard="plan", message=(
            f"forward allocated on {', '.join(foreign)}: allocate outputs on the inputs' device (torch.empty_like, "
            "x.new_empty, device=x.device)")))
    if not resp.get("ok"):
        verdict.status, verdict.error = "runtime_error", resp.get("error") or "forward failed while recorded"
    else:
        try:
            plan = Plan(**resp["plan"])
        except Exception as e:
            problems.append(Finding(guard="plan", message=f"forward could not be written down as a plan: {e}"))
        else:
            problems += [Finding(guard="plan", message=p) for p in check_plan(
                plan, spec, [tensor_nbytes(d) for d in described], ev.state_nbytes,
                int(ev.budget_bytes * ev.cfg.memory_fraction))]
            if not any(s.op == "call" for s in plan.steps):
                problems.append(Finding(guard="no_kernel", message=(
                    "forward called none of your launchers: all work must be done by your own kernels")))
    for f in problems:
        if f not in verdict.findings:
            verdict.findings.append(f)
    return plan.model_dump() if resp.get("ok") and not problems else None
