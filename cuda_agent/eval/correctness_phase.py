"""The correctness phase of an evaluation: n input sets on fresh seeds, each recorded as a plan,
replayed by the judge, and its outputs compared here with the reference (docs/correctness.md)."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from cuda_agent.eval import checks
from cuda_agent.eval.channel import JailedChild
from cuda_agent.eval.dynamic_guards import judge_kernels
from cuda_agent.eval.plan import describe
from cuda_agent.eval.recording import record_plan
from cuda_agent.eval.verdict import Finding, SetResult, Verdict

if TYPE_CHECKING:
    from cuda_agent.eval.evaluator import Evaluator


def check_sets(ev: Evaluator, recorder: JailedChild, judge: JailedChild, build: Any, spec: dict, verdict: Verdict,
               threads: int, plans: dict[str, dict]) -> dict:
    """Run every input set; return the per-output tolerances (tightened by the zero trap). `plans`
    gets each input layout's checked plan (repr of its description -> plan): the plans timing replays."""
    tol = ev.cfg.tolerances
    out_tols: dict[int, Any] = {}
    for i in range(ev.cfg.n_sets):
        seed = secrets.randbits(31)
        inputs = ev.ref.inputs(seed)
        described = [describe(x) for x in inputs]
        plan = record_plan(ev, recorder, described, spec, verdict)
        if plan is None:
            verdict.status = "guard_violation" if verdict.status == "correct" else verdict.status
            return out_tols
        if plans.setdefault(repr(described), plan) != plan:
            verdict.findings.append(Finding(guard="plan", message=(
                "forward launched different work for inputs of the same shapes: forward must be a function of "
                "its inputs (no state kept between calls)")))
        ref32, ref64 = ev.ref.outputs(inputs)  # empties inputs: the judge draws its own copy
        probe = ev.ref.downgrade_probe(seed, ref64) if ref64 else None  # the TF32 signature (precision.py)
        if i == 0:
            out_tols = _tolerances(ref32, ref64, tol, verdict)
        files = checks.output_files(judge.scratch, f"set{i}", len(ref32))
        resp = judge.request({"op": "run", "plan": plan, "seed": seed, "files": [str(f) for f in files],
                              "trace": i == 0 and ev.cuda and ev.cfg.trace_kernels}, ev.cfg.timeout_s)
        if not resp.get("ok"):
            verdict.sets.append(SetResult(seed=seed, ok=False, error=checks.error_text(resp)))
            verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
            return out_tols
        if resp.get("kernels"):
            verdict.findings += judge_kernels(resp["kernels"], checks.own_kernels(build), checks.libraries(build),
                                              allowed_torch=True)
        verdict.findings += checks.new_threads(threads, judge.threads())
        bufs = checks.read_outputs(files, resp.get("outputs", []), ref32)
        result = checks.judge_set(seed, resp, bufs, ref32, ref64, out_tols, tol, ev.ref.fp32,
                                  ev.cfg.allow_precision, verdict, probe=probe)
        if resp.get("mutated"):
            verdict.findings.append(Finding(guard="input_mutation", message=(
                f"forward changed its input(s) {resp['mutated']}: inputs are read-only; write results to new outputs")))
            result.ok = False
        verdict.sets.append(result)
        if not result.ok:
            verdict.status = "incorrect"
        del bufs, ref32, ref64, probe
        ev.ref.release_cached()  # the next set's references fit where these were, beside the judge's
    return out_tols


def _tolerances(ref32: list, ref64: list | None, tol: Any, verdict: Verdict) -> dict[int, Any]:
    """Each output's tolerances from the first set's references (the zero trap). A function of its
    own so that its loop names die with it: bound in check_sets, they kept the first set's
    references alive through every later set (a third of the parent's peak on the H200)."""
    out_tols = {}
    for j, (r, r64) in enumerate(zip(ref32, ref64 or ref32)):
        out_tols[j], note = checks.zero_trap(r, r64, tol)
        if note:
            verdict.notes.append(f"output {j}: {note}")
    return out_tols
