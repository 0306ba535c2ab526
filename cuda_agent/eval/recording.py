"""What forward does, written down by the recorder as a plan and checked here (plan.py).

The recorder imports model_new.py; every plan it returns is checked against the task's inputs,
parameters and memory budget before a judge may replay it.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from cuda_agent.eval.channel import ChildError, JailedChild
from cuda_agent.eval.context import EvalContext
from cuda_agent.eval.draft import Draft
from cuda_agent.eval.dynamic_guards import aten_findings
from cuda_agent.eval.plan import Plan, check_plan, describe, tensor_nbytes
from cuda_agent.eval.protocol import Load, Record
from cuda_agent.eval.verdict import Finding
from cuda_agent.untrusted_files import SOURCE_CAP, read_text


def load_recorder(ctx: EvalContext, recorder: JailedChild, candidate_dir: Path, spec: dict, draft: Draft) -> bool:
    try:  # the candidate's file, read as untrusted_files says (a FIFO or a link there is not opened)
        source = read_text(candidate_dir / "model_new.py", root=candidate_dir, limit=SOURCE_CAP, shown="model_new.py")
    except OSError as e:
        draft.fail("error", str(e))
        return False
    resp = recorder.request(
        Load(
            source=source,
            spec=spec,
            init_inputs=[describe(x) for x in ctx.ref.init_inputs],
            init_seed=ctx.cfg.init_seed,
            state=sorted(ctx.ref.state_dict),
        ),
        ctx.cfg.timeout_s,
    )
    if not resp.ok:
        draft.fail("runtime_error", resp.error_text())
    return resp.ok


def record_only(ctx: EvalContext, candidate_dir: Path, draft: Draft) -> None:
    """Record one input set without judging it: names the torch compute forward did instead of kernels."""
    recorder = ctx.spares.take("recorder")
    try:
        if load_recorder(ctx, recorder, candidate_dir, {}, draft):
            inputs = ctx.ref.inputs(secrets.randbits(31))
            record_plan(ctx, recorder, [describe(x) for x in inputs], {}, draft)
    except ChildError as e:
        draft.note(f"forward could not be recorded: {e}")
    finally:
        recorder.kill()


def record_plan(ctx: EvalContext, recorder: JailedChild, described: list, spec: dict, draft: Draft) -> dict | None:
    """Record forward on one input set's layout (`described`); the plan once checked, or None with
    the draft saying why. Torch compute is a problem like any other: a replay would leave it out."""
    resp = recorder.request(Record(inputs=described), ctx.cfg.timeout_s)
    if resp.plan is None:
        draft.fail("runtime_error", resp.error_text())
        return None
    problems = [Finding(guard=g, message=m) for g, m in resp.problems]
    problems += aten_findings(resp.compute)
    foreign = [d for d in resp.devices if d != ctx.device.split(":")[0]]
    if foreign:
        problems.append(
            Finding(
                guard="plan",
                message=(
                    f"forward allocated on {', '.join(foreign)}: allocate outputs on the inputs' device "
                    "(torch.empty_like, x.new_empty, device=x.device)"
                ),
            )
        )
    if not resp.ok:
        draft.fail("runtime_error", resp.error or "forward failed while recorded")
    else:
        try:
            plan = Plan(**resp.plan)
        except Exception as e:
            problems.append(Finding(guard="plan", message=f"forward could not be written down as a plan: {e}"))
        else:
            problems += [
                Finding(guard="plan", message=p)
                for p in check_plan(
                    plan, spec, [tensor_nbytes(d) for d in described], ctx.state_nbytes, ctx.plan_budget()
                )
            ]
            if not any(s.op == "call" for s in plan.steps):
                problems.append(
                    Finding(
                        guard="no_kernel",
                        message=("forward called none of your launchers: all work must be done by your own kernels"),
                    )
                )
    draft.find(*problems)
    return plan.model_dump() if resp.ok and not problems else None
