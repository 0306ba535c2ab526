"""The timing phase of an evaluation: the candidate on input sets correctness never showed, in a
loop the parent's clock brackets, then the eager and torch.compile baselines: cached (timed once
per task, GPU and torch version) during a run; timed again beside the candidate, in interleaved
rounds (candidate, eager, compile), where `baseline_rounds` asks for it (the final re-verification),
so one baseline sample taken hours earlier cannot decide a reward near the 5% line."""

from __future__ import annotations

import secrets
import time

from cuda_agent.eval import checks
from cuda_agent.eval.baselines import BaselineCache, timing_from
from cuda_agent.eval.channel import ChildError, JailedChild
from cuda_agent.eval.context import EvalContext
from cuda_agent.eval.device_lock import device_lock, nvml_index
from cuda_agent.eval.draft import Draft
from cuda_agent.eval.plan import describe
from cuda_agent.eval.protocol import Calibrate, TimeCollect, Timed, TimedSet, TimeLoop, TimePrepare, TimeReference
from cuda_agent.eval.reference import verify_snapshot
from cuda_agent.eval.verdict import Finding, Timing
from cuda_agent.task import TaskError

ROTATION_BYTES = 2 << 30  # timing sets that together stay under this are all kept (the budget allowing)


def calibrate(ctx: EvalContext, judge: JailedChild) -> None:
    """The judge's cost per timed rep around nothing, by our clock, before any candidate code is
    loaded there (once per evaluator: the machine does not change)."""
    if ctx.overhead_ms is not None:
        return
    reps = 50
    t0 = time.perf_counter()
    resp = judge.request(Calibrate(config=ctx.cfg.timing.model_dump(), reps=reps), 60)
    if resp.ok:
        ctx.overhead_ms = (time.perf_counter() - t0) * 1e3 / reps


def time_candidate(
    ctx: EvalContext, judge: JailedChild, plans: dict[str, dict], out_tols: dict, draft: Draft, threads: int
) -> list[int]:
    """Time on input sets the correctness phase never showed; returns their seeds. Each set is
    replayed with the plan checked for its input layout (`plans`, from the correctness phase): the
    recorder is not asked again, so a forward that changes what it launches after the checked sets
    changes nothing timed. The judge holds every timing set's inputs and outputs through the loop;
    the parent holds none of them: each set's references are made after the loop, one set at a
    time, and compared with what the judge wrote (inputs are a pure function of their seed)."""
    per_set = ctx.ref.eager_bytes or 2 * ctx.ref.input_bytes  # one set in the judge: inputs, outputs
    kept: list[TimedSet] = []
    for _ in range(timing_set_count(per_set, ctx.plan_budget(), ctx.cfg.timing_sets)):
        found = _checked_layout(ctx, plans)
        if found is None:
            draft.fail(
                "unscorable",
                (
                    f"get_inputs() drew no input set of a checked layout in {REDRAWS} tries: a task whose input "
                    "shapes vary from draw to draw cannot be timed on the plans its correctness sets checked"
                ),
            )
            return []
        kept.append(found)
    ctx.ref.release_cached()  # the sets just drawn to describe them: the judge's timing sets need the room
    cfg = ctx.cfg.timing
    resp = judge.request(TimePrepare(sets=kept, config=cfg.model_dump()), ctx.cfg.timeout_s + cfg.warmup_ms / 1e3 * 4)
    if not resp.ok:
        draft.fail("runtime_error", resp.error_text())
        return []
    per_call = max(resp.per_call_ms or 1e-3, 1e-3)
    reps = int(min(cfg.max_reps, max(cfg.min_reps, cfg.budget_ms / per_call)))
    timing = _timed_loop(ctx, judge, reps, draft)
    if timing is None:
        return []
    draft.timed(timing)
    seeds = [k.seed for k in kept]
    if ctx.cfg.baseline_rounds and not draft.failing and _both_fit(ctx, per_set * len(kept)):
        interleave(ctx, judge, reps, seeds, draft)
        if draft.status != "correct":
            return []
    files = [checks.output_files(judge.scratch, f"timed{k}", len(s.plan["outputs"])) for k, s in enumerate(kept)]
    collected = judge.request(TimeCollect(files=[[str(f) for f in fs] for fs in files]), ctx.cfg.timeout_s)
    if not collected.ok:
        draft.fail("runtime_error", collected.error_text())
        return []
    draft.find(*checks.new_threads(threads, judge.threads()))
    if collected.mutated_sets:
        draft.find(
            Finding(
                guard="input_mutation",
                message=(
                    "forward changed its inputs during timing: inputs are read-only; write results to new outputs"
                ),
            )
        )
    for k, (fs, s) in enumerate(zip(files, kept)):
        ref32, ref64 = ctx.ref.outputs(ctx.ref.inputs(s.seed))
        bufs = checks.read_outputs(fs, None, ref32)
        mismatch = checks.timed_output_mismatch(k, bufs, ref32, ref64, out_tols, ctx.cfg.tolerances)
        del bufs, ref32, ref64
        if mismatch:
            draft.find(mismatch)
            for f in (f for rest in files[k + 1 :] for f in rest):
                f.unlink(missing_ok=True)
            break
    ctx.ref.release_cached()  # the baselines' judge starts next: what the comparisons cached
    return seeds


REDRAWS = 20  # fresh draws tried for an input set whose layout a correctness set checked


def _checked_layout(ctx: EvalContext, plans: dict[str, dict]) -> TimedSet | None:
    """A fresh seed whose input set has a layout the correctness phase checked, with that plan."""
    for _ in range(REDRAWS):
        seed = secrets.randbits(31)
        inputs = ctx.ref.inputs(seed)
        plan = plans.get(repr([describe(x) for x in inputs]))
        del inputs
        if plan is not None:
            return TimedSet(seed=seed, plan=plan)
    return None


def timing_set_count(per_set: int, budget: int, wanted: int) -> int:
    """How many input sets the judge rotates through while timing: `wanted` as far as the budget
    holds them, and two once together they pass ROTATION_BYTES. The judge keeps them all through
    the loop, and at the final re-verification a baselines' judge keeps as many beside it: on
    KernelBench's 6 GB tasks a third set is 12 GiB more in each, and two sets rotate as well."""
    room = min(budget, max(2 * per_set, ROTATION_BYTES))
    return max(1, min(wanted, room // max(per_set, 1)))


def _timed_loop(ctx: EvalContext, judge: JailedChild, reps: int, draft: Draft) -> Timing | None:
    """One measured loop of the prepared timing sets, bounded by the parent's clock; None (and
    a runtime_error draft) when the judge failed or its figures are not a timing."""
    cfg = ctx.cfg.timing
    with device_lock(ctx.cache_dir / "locks", ctx.device):
        t0 = time.perf_counter()
        resp = judge.request(
            TimeLoop(reps=reps, nvml_index=nvml_index(ctx.device)), ctx.cfg.timeout_s + cfg.budget_ms / 1e3 * 4
        )
        wall_ms = (time.perf_counter() - t0) * 1e3
    timing = _claimed_timing(resp, draft)
    if timing is None:
        return None
    seen = draft.guards()
    draft.find(
        *[
            f
            for f in checks.side_work(timing)
            + checks.wall_clock_bound(
                timing, wall_ms, reps, ctx.overhead_ms, per_rep_slack_ms=0.05 if ctx.cuda else 1.0
            )
            if f.guard not in seen
        ]
    )
    return timing


def _claimed_timing(resp: Timed, draft: Draft) -> Timing | None:
    """The judge's figures as a Timing, or None with the draft saying why (it failed, or what it
    sent is not a timing: a claim the parent cannot even read counts as the candidate's failure)."""
    if not resp.ok:
        draft.fail("runtime_error", resp.error_text())
        return None
    try:
        return Timing(**(resp.timing or {}))
    except (TypeError, ValueError) as e:
        draft.fail("runtime_error", f"the judge's timing does not follow the protocol: {str(e).splitlines()[0]}")
        return None


def _both_fit(ctx: EvalContext, judge_bytes: int) -> bool:
    """Whether a baselines' judge (one eager forward per timing set) fits beside the candidate's
    judge, which keeps its timing sets through the rounds."""
    return not ctx.cuda or 2 * judge_bytes <= ctx.budget_bytes


def _middle(timings: list[Timing]) -> Timing:
    """The round whose median is the median of the rounds' (the lower one of an even count)."""
    ranked = sorted(timings, key=lambda t: t.median_ms)
    return ranked[(len(ranked) - 1) // 2]


def interleave(ctx: EvalContext, judge: JailedChild, reps: int, seeds: list[int], draft: Draft) -> None:
    """`baseline_rounds` rounds of candidate, eager, compile, one after the other, each under the
    GPU lock: the candidate in its judge (its first round is the loop just measured), the baselines
    on the same input sets in a judge that never loads a candidate's library, started now and
    killed after. Each figure is its median round's; the baseline cache is neither read nor
    written. When a baseline fails here, draft.baselines stays None (the caller times them
    after the candidate's processes are gone)."""
    rounds = max(1, ctx.cfg.baseline_rounds)
    assert draft.timing is not None  # the first round: the loop time_candidate just measured
    times: dict[str, list[Timing]] = {"candidate": [draft.timing]} | {mode: [] for mode in ctx.cfg.baselines}
    base: JailedChild | None = None
    try:
        for r in range(rounds):
            if r:  # the candidate's judge: its failures are the candidate's (runtime_error, raised on)
                timing = _timed_loop(ctx, judge, reps, draft)
                if timing is None:
                    return
                times["candidate"].append(timing)
            try:
                base = base or ctx.spares.start("judge")
                for mode in ctx.cfg.baselines:
                    entry = _time_reference(ctx, base, seeds, mode)
                    if entry is None:
                        draft.note(f"{mode} baseline failed beside the candidate: {base.log_tail()[-300:]}")
                        return
                    times[mode].append(Timing(**entry["timing"]))
            except (ChildError, TaskError) as e:
                draft.note(f"baselines beside the candidate failed: {e}")
                return
    finally:
        if base is not None:
            base.kill()
            draft.memory("baselines", base.peak_bytes)
    draft.timed(_middle(times["candidate"]))
    draft.baselines_from("interleaved")
    for mode in ctx.cfg.baselines:
        if times[mode]:
            draft.baseline(mode, _middle(times[mode]))
    medians = "; ".join(f"{name} " + "/".join(f"{t.median_ms:.4f}" for t in ts) for name, ts in times.items())
    draft.note(
        f"baselines timed again beside the candidate: {rounds} interleaved round"
        f"{'s' * (rounds != 1)} of {', '.join(times)} on the same input sets, each figure the "
        f"median round's (ms per round: {medians})"
    )


def fill_baselines(ctx: EvalContext, seeds: list[int], draft: Draft, *, fresh: bool = False) -> int:
    """Fill the draft's eager / compiled figures, timing what the cache lacks (in a judge that never
    loads a candidate's library); returns how many modes were found in the cache. `fresh`: time
    every mode now and neither read nor write the cache."""
    import torch

    device_name = torch.cuda.get_device_name(ctx.device) if ctx.cuda else "cpu"
    judge: JailedChild | None = None
    cached = 0
    draft.baselines_from("fresh" if fresh else "cached")
    notes: list[str] = []  # what the cache says of its entries, each once
    try:
        for mode in ctx.cfg.baselines:
            key = BaselineCache.key(
                ctx.task.source_hash,
                device_name,
                torch.__version__,
                ctx.ref.dtypes,
                mode if mode == "eager" else f"compile:{ctx.cfg.compile_mode}",
                ctx.cfg.timing,
            )
            entry = None if fresh else ctx.baseline_cache.get(key, notes)
            cached += entry is not None
            if entry is None:
                judge = judge or ctx.spares.start("judge")
                entry = _time_reference(ctx, judge, seeds, mode)
                if entry is None:
                    draft.note(f"{mode} baseline failed: {judge.log_tail()[-300:]}; reward uses what was timed")
                    continue
                verify_snapshot(ctx.task)  # never cache a time measured on a changed task copy
                if not fresh:
                    ctx.baseline_cache.put(key, entry)
            if (timing := timing_from(entry)) is not None:
                draft.baseline(mode, timing)
    except (ChildError, TaskError) as e:
        draft.note(f"baseline process failed: {e}")
    finally:
        for text in notes:
            draft.note(text)
        if judge is not None:
            judge.kill()
            draft.memory("baselines", judge.peak_bytes)
    return cached


def _time_reference(ctx: EvalContext, judge: JailedChild, seeds: list[int], mode: str) -> dict | None:
    """One baseline timed in a judge that never loads a candidate's library (its figures are the
    harness's own); None when it failed."""
    with device_lock(ctx.cache_dir / "locks", ctx.device):
        resp = judge.request(
            TimeReference(
                seeds=seeds,
                config=ctx.cfg.timing.model_dump(),
                compile_mode=None if mode == "eager" else ctx.cfg.compile_mode,
                nvml_index=nvml_index(ctx.device),
            ),
            ctx.cfg.baseline_timeout_s,
        )
    if not resp.ok or resp.timing is None:
        return None
    return {"timing": resp.timing, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
