"""The correctness phase of an evaluation: n input sets on fresh seeds, each recorded as a plan,
replayed by the judge on a block the parent filled and lent for that call, and its outputs read
and compared here, in the parent's own memory (docs/correctness.md)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from cuda_agent.eval import batch as lay
from cuda_agent.eval import checks
from cuda_agent.eval.channel import JailedChild
from cuda_agent.eval.context import EvalContext
from cuda_agent.eval.draft import Draft
from cuda_agent.eval.dynamic_guards import kernel_findings
from cuda_agent.eval.handover import Block
from cuda_agent.eval.plan import Plan, describe
from cuda_agent.eval.protocol import Prepare, Run
from cuda_agent.eval.recording import record_plan
from cuda_agent.eval.state_check import state_problem
from cuda_agent.eval.verdict import Finding, SetResult


@dataclass
class FirstSet:
    """The first input set, recorded before the judge loads the library: its plan's layout is
    what the parent's clock is calibrated on, and the plan timing replays."""

    seed: int
    described: list
    plan: dict


def _recorded(ctx: EvalContext, recorder: JailedChild, described: list, spec: dict, draft: Draft) -> dict | None:
    """The plan the recorder made for inputs like `described`; None with the draft failed (a guard
    violation where the recording itself said nothing worse)."""
    plan = record_plan(ctx, recorder, described, spec, draft)
    if plan is None and draft.status == "correct":
        draft.fail("guard_violation")
    return plan


def first_set(ctx: EvalContext, recorder: JailedChild, spec: dict, draft: Draft) -> FirstSet | None:
    seed = secrets.randbits(31)
    described = [describe(x) for x in ctx.ref.inputs(seed)]
    plan = _recorded(ctx, recorder, described, spec, draft)
    return None if plan is None else FirstSet(seed, described, plan)


def check_sets(
    ctx: EvalContext,
    recorder: JailedChild,
    judge: JailedChild,
    build: Any,
    spec: dict,
    draft: Draft,
    threads: int,
    first: FirstSet,
) -> dict:
    """Run every input set; return the per-output tolerances (tightened by the zero trap)."""
    out_tols: dict[int, Any] = {}
    plans: dict[str, dict] = {repr(first.described): first.plan}
    for i in range(ctx.cfg.n_sets):
        if i == 0:
            seed, plan, inputs = first.seed, first.plan, ctx.ref.inputs(first.seed)
        else:
            seed = secrets.randbits(31)
            inputs = ctx.ref.inputs(seed)
            described = [describe(x) for x in inputs]
            recorded = _recorded(ctx, recorder, described, spec, draft)
            if recorded is None:
                return out_tols
            plan = recorded
            if plans.setdefault(repr(described), plan) != plan:
                draft.find(
                    Finding(
                        guard="plan",
                        message=(
                            "forward launched different work for inputs of the same shapes: forward must be a "
                            "function of its inputs (no state kept between calls)"
                        ),
                    )
                )
        result = _one_set(ctx, judge, build, i, seed, plan, inputs, out_tols, draft)
        if result is None:
            return out_tols
        draft.find(*checks.new_threads(threads, judge.threads()))
        draft.add_set(result)
        ctx.ref.release_cached()  # the next set's references fit where these were, beside the judge's
    return out_tols


def _one_set(
    ctx: EvalContext,
    judge: JailedChild,
    build: Any,
    i: int,
    seed: int,
    plan: dict,
    inputs: list,
    out_tols: dict,
    draft: Draft,
) -> SetResult | None:
    """One checked call: the block filled (parameters, inputs, poisoned allocations), the
    references made, the call replayed on the lent block, then its outputs, inputs and state
    read here. None (and a runtime_error draft) when the judge failed."""
    checked = Plan(**plan)
    layout = lay.plan_layout(checked, 1)
    prepared = judge.request(Prepare(plan=plan, layout=layout.request()), ctx.cfg.timeout_s)
    if not prepared.ok:
        draft.fail("runtime_error", prepared.error_text())
        return None
    with Block(layout.nbytes, ctx.device) as block:
        lay.fill_params(block, checked, layout, ctx.ref.state_dict)
        lay.fill_plan_rep(block, checked, layout, 0, inputs, ctx.ref.state_dict)
        ref32, ref64 = ctx.ref.outputs(inputs)  # empties inputs: the block holds the judge's copy
        probe = ctx.ref.downgrade_probe(seed, ref64) if ref64 else None  # the TF32 signature (precision.py)
        if i == 0:
            out_tols.update(_tolerances(ref32, ref64, ctx.cfg.tolerances, draft))
        resp = judge.request(Run(trace=i == 0 and ctx.cuda and ctx.cfg.trace_kernels), ctx.cfg.timeout_s, lend=block.fd)
        if not resp.ok:
            draft.add_set(SetResult(seed=seed, ok=False, error=resp.error_text()))
            draft.fail("runtime_error", resp.error_text())
            return None
        if resp.kernels:
            draft.find(
                *kernel_findings(
                    list(resp.kernels), checks.own_kernels(build), checks.libraries(build), allowed_torch=True
                )
            )
        outs = lay.output_views(block, checked, layout, 0)
        result, found = checks.check_set(
            seed,
            lay.output_meta(checked),
            outs,
            ref32,
            ref64,
            out_tols,
            ctx.cfg.tolerances,
            ctx.ref.fp32,
            ctx.cfg.allow_precision,
            probe=probe,
        )
        draft.find(*found)
        del outs, ref32, ref64, probe
        mutated = lay.changed_inputs(block, checked, layout, 0, ctx.ref.inputs(seed))
        if mutated:
            draft.find(
                Finding(
                    guard="input_mutation",
                    message=(
                        f"forward changed its input(s) {mutated}: inputs are read-only; write results to new outputs"
                    ),
                )
            )
            result.ok = False
        state = state_problem(ctx, block, checked, layout)
        if state:
            draft.find(state)
            result.ok = False
    return result


def _tolerances(ref32: list, ref64: list | None, tol: Any, draft: Draft) -> dict[int, Any]:
    """Each output's tolerances from the first set's references (the zero trap). A function of its
    own so that its loop names die with it: bound in check_sets, they kept the first set's
    references alive through every later set (a third of the parent's peak on the H200)."""
    out_tols = {}
    for j, (r, r64) in enumerate(zip(ref32, ref64 or ref32)):
        out_tols[j], note = checks.zero_trap(r, r64, tol)
        if note:
            draft.note(f"output {j}: {note}")
    return out_tols
