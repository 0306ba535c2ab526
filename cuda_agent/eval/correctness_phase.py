"""The correctness phase of an evaluation: n input sets on fresh seeds, each recorded as a plan,
replayed by the judge, and its outputs compared here with the reference (docs/correctness.md)."""

from __future__ import annotations

import secrets
from typing import Any

from cuda_agent.eval import checks
from cuda_agent.eval.channel import JailedChild
from cuda_agent.eval.context import EvalContext
from cuda_agent.eval.draft import Draft
from cuda_agent.eval.dynamic_guards import kernel_findings
from cuda_agent.eval.plan import describe
from cuda_agent.eval.protocol import Run
from cuda_agent.eval.recording import record_plan
from cuda_agent.eval.verdict import Finding, SetResult


def check_sets(
    ctx: EvalContext,
    recorder: JailedChild,
    judge: JailedChild,
    build: Any,
    spec: dict,
    draft: Draft,
    threads: int,
    plans: dict[str, dict],
) -> dict:
    """Run every input set; return the per-output tolerances (tightened by the zero trap). `plans`
    gets each input layout's checked plan (repr of its description -> plan): the plans timing replays."""
    tol = ctx.cfg.tolerances
    out_tols: dict[int, Any] = {}
    for i in range(ctx.cfg.n_sets):
        seed = secrets.randbits(31)
        inputs = ctx.ref.inputs(seed)
        described = [describe(x) for x in inputs]
        plan = record_plan(ctx, recorder, described, spec, draft)
        if plan is None:
            if draft.status == "correct":
                draft.fail("guard_violation")
            return out_tols
        if plans.setdefault(repr(described), plan) != plan:
            draft.find(
                Finding(
                    guard="plan",
                    message=(
                        "forward launched different work for inputs of the same shapes: forward must be a function of "
                        "its inputs (no state kept between calls)"
                    ),
                )
            )
        ref32, ref64 = ctx.ref.outputs(inputs)  # empties inputs: the judge draws its own copy
        probe = ctx.ref.downgrade_probe(seed, ref64) if ref64 else None  # the TF32 signature (precision.py)
        if i == 0:
            out_tols = _tolerances(ref32, ref64, tol, draft)
        files = checks.output_files(judge.scratch, f"set{i}", len(ref32))
        resp = judge.request(
            Run(
                plan=plan, seed=seed, files=[str(f) for f in files], trace=i == 0 and ctx.cuda and ctx.cfg.trace_kernels
            ),
            ctx.cfg.timeout_s,
        )
        if not resp.ok:
            draft.add_set(SetResult(seed=seed, ok=False, error=resp.error_text()))
            draft.fail("runtime_error", resp.error_text())
            return out_tols
        if resp.kernels:
            draft.find(
                *kernel_findings(resp.kernels, checks.own_kernels(build), checks.libraries(build), allowed_torch=True)
            )
        draft.find(*checks.new_threads(threads, judge.threads()))
        bufs = checks.read_outputs(files, resp.outputs, ref32)
        result, found = checks.check_set(
            seed, resp, bufs, ref32, ref64, out_tols, tol, ctx.ref.fp32, ctx.cfg.allow_precision, probe=probe
        )
        draft.find(*found)
        if resp.mutated:
            draft.find(
                Finding(
                    guard="input_mutation",
                    message=(
                        f"forward changed its input(s) {resp.mutated}: inputs are read-only; write results to new "
                        "outputs"
                    ),
                )
            )
            result.ok = False
        draft.add_set(result)
        del bufs, ref32, ref64, probe
        ctx.ref.release_cached()  # the next set's references fit where these were, beside the judge's
    return out_tols


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
