"""The timing phase of an evaluation: the checked plan on inputs no earlier call saw, in batches
the parent's clock measures (clocked.py), then the eager and torch.compile baselines timed the
same way: cached (timed once per task, GPU and torch version) during a run; timed again beside
the candidate, in interleaved rounds (candidate, eager, compile), where `baseline_rounds` asks
for it (the final re-verification), so one baseline sample taken hours earlier cannot decide a
reward near the 5% line."""

from __future__ import annotations

import contextlib
import itertools
import random
import secrets
import statistics
import time
from typing import Any, Callable

from cuda_agent.eval import batch as lay
from cuda_agent.eval import checks
from cuda_agent.eval.baselines import BaselineCache, timing_from
from cuda_agent.eval.channel import ChildError, JailedChild
from cuda_agent.eval.clocked import (
    Batch,
    Batches,
    Overhead,
    calibrate,
    figure,
    overlapped,
    prepare,
    run_batch,
    secret_sample,
    timeline_for,
)
from cuda_agent.eval.context import EvalContext
from cuda_agent.eval.device_lock import device_lock, nvml_index
from cuda_agent.eval.draft import Draft
from cuda_agent.eval.handover import Block
from cuda_agent.eval.plan import Plan, describe
from cuda_agent.eval.protocol import Prepare, PrepareReference, Reply
from cuda_agent.eval.reference import verify_snapshot
from cuda_agent.eval.state_check import state_problem
from cuda_agent.eval.timing import next_reps, resolving_reps, summarize
from cuda_agent.eval.verdict import Finding, Timing
from cuda_agent.task import TaskError

BLOCK_BYTES = 2 << 30  # one batch's block stays under this (the memory budget allowing)
# how the host's wall clock is calibrated in a judge with no candidate code: "noop" (batches of the
# measured layout in which nothing runs, on one block) or "noop-fresh" (a new block for each, as
# measured batches have); the GPU timeline calibrates its own way (clocked.calibrate_timeline)
CALIBRATION = "noop"
REDRAWS = 20  # fresh draws tried for inputs of the checked plan's shapes (tasks whose shapes vary)
Check = Callable[[Block, lay.Layout, Batch], Finding | None]  # after each measured batch (a finding stops it)


class ShapesVary(TaskError):
    """get_inputs() drew no input set of the checked plan's shapes: the task cannot be timed."""


def _max_reps(ctx: EvalContext, layout: lay.Layout, shared: int) -> int:
    per_rep = max(1, layout.nbytes - shared)  # `layout`: one rep's
    # on a GPU the parent fills a private block and copies it into the one the judge keeps: two of them
    budget = ctx.plan_budget() // (2 if ctx.cuda else 1)
    room = min(budget, BLOCK_BYTES) - shared  # parameters: once a block
    return max(1, min(ctx.cfg.timing.max_batch_reps, room // per_rep))


def _inputs_like(ctx: EvalContext, described: list) -> tuple[int, list]:
    """A fresh seed whose input set has the layout `described` (the checked plan's)."""
    for _ in range(REDRAWS):
        seed = secrets.randbits(31)
        inputs = ctx.ref.inputs(seed)
        if [describe(x) for x in inputs] == described:
            return seed, inputs
    raise ShapesVary(
        f"get_inputs() drew no input set of the checked shapes in {REDRAWS} tries: a task whose "
        "input shapes vary from draw to draw cannot be timed"
    )


def candidate_batches(ctx: EvalContext, judge: JailedChild, plan: dict, described: list) -> Batches:
    checked = Plan(**plan)
    # each call gets its own copy of every buffer, so that a sampled call's update is checked like its
    # outputs (a call that skips it cannot hide in a batch); every buffer, not only those the checked
    # sets' forwards updated: a forward may update one on some inputs only
    buffers = ctx.ref.buffer_names
    one = lay.plan_layout(checked, 1, buffers)
    shared = sum(s.nbytes for i, s in enumerate(checked.storages) if s.kind == "param" and i not in one.per_rep)

    def fill_rep(block: Block, layout: lay.Layout, r: int) -> int:
        seed, inputs = _inputs_like(ctx, described)
        lay.fill_plan_rep(block, checked, layout, r, inputs, ctx.ref.state_dict)
        return seed

    slots: list[list] = []  # where the sampled reps' outputs are copied: made once, reused by every batch

    def snapshot(block: Block, layout: lay.Layout, reps: list[int]) -> dict:
        import torch

        while len(slots) < len(reps):
            slots.append([torch.empty_like(v) for v in lay.output_views(block, checked, layout, 0)])
        return {r: lay.snapshot(block, checked, layout, r, into=slot) for r, slot in zip(reps, slots)}

    b = Batches(
        judge=judge,
        device=ctx.device,
        timeout_s=ctx.cfg.timeout_s,
        prepare=lambda layout, noop: Prepare(plan=plan, layout=layout.request(), noop=noop),
        layout=lambda reps: lay.plan_layout(checked, reps, buffers),
        fill_shared=lambda block, layout: lay.fill_params(block, checked, layout, ctx.ref.state_dict),
        fill_rep=fill_rep,
        snapshot=snapshot,
        timeline=timeline_for(judge, ctx.device, ctx.cfg.timeout_s),
    )
    b.max_reps = _max_reps(ctx, one, shared)
    return b


def reference_batches(ctx: EvalContext, judge: JailedChild, mode: str) -> Batches:
    sample = ctx.ref.inputs(secrets.randbits(31))
    described = [describe(x) for x in sample]
    sizes = [t.untyped_storage().nbytes() for t in lay.tensor_inputs(sample)]
    del sample

    def fill_rep(block: Block, layout: lay.Layout, r: int) -> int:
        seed, inputs = _inputs_like(ctx, described)
        lay.fill_input_rep(block, layout, r, inputs)
        return seed

    compile_mode = None if mode == "eager" else ctx.cfg.compile_mode
    b = Batches(
        judge=judge,
        device=ctx.device,
        timeout_s=ctx.cfg.baseline_timeout_s,
        prepare=lambda layout, noop: PrepareReference(
            inputs=described, layout=layout.request(), compile_mode=compile_mode, noop=noop
        ),
        layout=lambda reps: lay.input_layout(sizes, reps),
        fill_shared=lambda block, layout: None,
        fill_rep=fill_rep,
        timeline=timeline_for(judge, ctx.device, ctx.cfg.baseline_timeout_s),
    )
    b.max_reps = _max_reps(ctx, b.layout(1), 0)
    return b


def calibrate_clock(
    ctx: EvalContext, judge: JailedChild, plan: dict | None = None, described: list | None = None
) -> Overhead | None:
    """The overhead of one batch, measured in `judge` before any candidate code is loaded: on the
    checked plan's layout (given) or the task's inputs' (a baselines' judge)."""
    fresh = CALIBRATION.endswith("-fresh")
    if plan is None or described is None:
        return calibrate(reference_batches(ctx, judge, "eager"), fresh=fresh)
    return calibrate(candidate_batches(ctx, judge, plan, described), fresh=fresh)


def measure(
    ctx: EvalContext, b: Batches, overhead: Overhead, draft: Draft, check: Check | None = None
) -> Timing | None:
    """Warm up (one block reused, growing R until a batch lasts `batch_ms`), then the measured
    batches, each on a block of fresh inputs, each checked by `check(block, layout, batch)` (a
    finding stops the loop). None, with the draft saying why, when the judge failed."""
    cfg = ctx.cfg.timing
    rng = random.SystemRandom()
    with device_lock(ctx.cache_dir / "locks", ctx.device):
        reps, per_call, warm, t0, grow = 1, 1.0, 0, time.perf_counter(), True
        cap = max(1, min(b.max_reps, cfg.max_batch_reps))
        while grow:  # a new R: a new layout; two batches at the final R at least
            layout = b.layout(reps)
            if not _prepared(b, layout, draft):
                return None
            with _warm_block(b, layout.nbytes, ctx.device) as block:
                b.fill_shared(block, layout)
                for r in range(reps):
                    b.fill_rep(block, layout, r)
                for k in itertools.count(1):
                    done, resp = run_batch(b, layout, overhead, [reps - 1], block=block)
                    if not resp.ok:
                        _failed(draft, resp)
                        return None
                    warm += reps
                    per_call = figure(done, overhead)[0]
                    # R grows until a batch lasts batch_ms by the clock itself (overhead and all): a
                    # per-call estimate from a short batch is mostly the overhead's noise
                    want = next_reps(reps, done.wall_ms, cfg, cap)
                    # and until its work is clear of the overhead's own error (clocked.RESOLVE), twice over:
                    # the measured batches' median must clear it too, on fresh blocks and a busier machine
                    more = resolving_reps(reps, done.per_call_ms * reps, 2 * overhead.floor_ms(), cap)
                    grow = want >= 2 * reps or more > reps
                    want = max(want, more)
                    if grow or (k >= 2 and (time.perf_counter() - t0) * 1e3 >= cfg.warmup_ms):
                        break
            reps = want if grow else reps
        t_measured = time.perf_counter()
        draft.spend("timing_warmup", t_measured - t0)
        n = max(cfg.min_batches, min(cfg.max_batches, round(cfg.budget_ms / max(reps * per_call, 1e-3))))
        layout = b.layout(reps)
        if not _prepared(b, layout, draft):
            return None
        figures: list[float] = []
        parents: list[float] = []
        events: list[float] = []
        gaps: list[float] = []
        clocks: dict[str, float] = {}
        for _ in range(n):
            batch = _checked_batch(b, layout, overhead, rng, draft, check)
            if batch is None:
                return None
            value, gap = figure(batch, overhead)
            figures.append(value)
            parents.append(batch.per_call_ms)
            gaps.append(gap)
            if batch.event_ms is not None:
                events.append(batch.event_ms)
        t1 = time.perf_counter()
        draft.spend("timing_measured", t1 - t_measured)
        single: float | None = None
        if check is not None and reps > 1:
            single = _single_call_ms(b, overhead, draft, check, rng)
            if single is None:
                return None
        draft.spend("timing_single", time.perf_counter() - t1)
    if ctx.cuda:
        from cuda_agent.eval.timing import read_clocks

        clocks = read_clocks(nvml_index(ctx.device))
    gaps.sort()
    if gaps[len(gaps) // 2] > 0:  # most batches: not one noisy one
        draft.find(
            Finding(
                guard="timing_mismatch",
                message=(
                    f"the judge's events read {sorted(events)[len(events) // 2]:.4f} ms per call but the parent's "
                    f"clock measured {sorted(parents)[len(parents) // 2]:.4f} ms: the timer in the judge was changed "
                    "or work ran outside the timed stream; launch all work on the stream passed to your launcher"
                ),
            )
        )
    parent = statistics.median(parents)
    if single is not None and overlapped(parent, single, overhead, ctx.cuda):
        draft.find(_overlap_finding(parent, single, reps))
        return None
    if parent * reps < overhead.floor_ms():
        draft.note(_unresolved(parent * reps, reps, overhead))
        return None
    summary = summarize(figures, reps * n, warm)
    return Timing(
        **summary,
        batch_reps=reps,
        parent_median_ms=parent,
        single_call_ms=single,
        event_median_ms=statistics.median(events) if events else None,
        resolution_ms=overhead.error_ms() / reps,
        clocks=clocks,
        device=_device_name(ctx),
    )


def _unresolved(work_ms: float, reps: int, overhead: Overhead) -> str:
    return (
        f"not timed: a batch of {reps} calls held {max(work_ms, 0.0):.3f} ms beyond the harness's own overhead "
        f"of {overhead.fixed:.3f} ms (its possible error {overhead.error_ms():.3f} ms), too little to tell the "
        f"calls' time from that error (at least {overhead.floor_ms():.3f} ms is needed): no speed is claimed "
        "(eval.timing.max_batch_reps and the memory a batch needs bound R; a busy machine raises the overhead)"
    )


SINGLE_BATCHES = 5  # batches of one call after the measured ones, for the overlap check


def _single_call_ms(b: Batches, overhead: Overhead, draft: Draft, check: Check, rng: Any) -> float | None:
    """The parent's figure for a call alone: the fastest of batches of one call, each on fresh inputs
    and checked. None, with the draft saying why, when the judge failed or a check found something."""
    layout = b.layout(1)
    if not _prepared(b, layout, draft):
        return None
    got: list[float] = []
    for _ in range(SINGLE_BATCHES):
        batch = _checked_batch(b, layout, overhead, rng, draft, check)
        if batch is None:
            return None
        got.append(batch.per_call_ms)
    return min(got)  # a delay only adds: the fastest is the least disturbed


def _overlap_finding(batch_ms: float, single_ms: float, reps: int) -> Finding:
    return Finding(
        guard="calls_overlap",
        message=(
            f"in batches of {reps} calls the parent's clock measured {batch_ms:.4f} ms per call, but {single_ms:.4f} "
            "ms for a call alone: later calls ran before their turn or side by side with earlier ones; compute "
            "each call from its own inputs when it is launched"
        ),
    )


def _checked_batch(
    b: Batches, layout: lay.Layout, overhead: Overhead, rng: Any, draft: Draft, check: Check | None
) -> Batch | None:
    """One batch on fresh inputs, its sampled calls (`secret_sample`) `check`ed on the block the judge
    ran on. None, with the draft saying why, when the judge failed or the check found something."""
    holder: dict[str, Finding | None] = {}

    def after(block: Block, done: Batch) -> None:
        t = time.perf_counter()
        holder["finding"] = check(block, layout, done) if check is not None else None
        draft.spend("timing_checks", time.perf_counter() - t)

    sample = secret_sample(len(layout.reps), rng, b.copies)
    done, resp = run_batch(b, layout, overhead, sample, after=after)
    draft.spend("timing_inputs", done.parent_phases["inputs_ms"] / 1e3)
    if not resp.ok:
        _failed(draft, resp)
        return None
    if holder.get("finding"):
        draft.find(holder["finding"])
        return None
    return done


def _device_name(ctx: EvalContext) -> str:
    if not ctx.cuda:
        return "cpu"
    import torch

    return torch.cuda.get_device_name(ctx.device)


def _warm_block(b: Batches, nbytes: int, device: str) -> contextlib.AbstractContextManager[Block]:
    """The warm-up's block: on the GPU timeline the parent's private one (the measured batches refill it;
    a block of its own would be a third beside it and the judge's kept one), else one of its own."""
    if b.timeline is not None:
        return contextlib.nullcontext(b.timeline.source_for(nbytes))
    return Block(nbytes, device)


def _prepared(b: Batches, layout: lay.Layout, draft: Draft) -> bool:
    resp = prepare(b, layout, False)
    if not resp.ok:
        _failed(draft, resp)
    return bool(resp.ok)


def _failed(draft: Draft, resp: Reply) -> None:
    """The judge failed a request: the candidate's runtime_error (its code shares the process)."""
    draft.fail("runtime_error", resp.error_text())


def candidate_check(ctx: EvalContext, plan: dict, out_tols: dict) -> Check:
    """After each measured batch, outside the clock: the sampled reps' outputs (copied when the
    judge answered) against references on the same inputs, their inputs unchanged, their own
    copies of the Model's buffers as the reference's forward left them from the same start, and
    the parameters the reps share unchanged."""
    checked = Plan(**plan)
    meta = lay.output_meta(checked)
    tol = ctx.cfg.tolerances
    rng = random.SystemRandom()

    def check(block: Block, layout: lay.Layout, done: Batch) -> Finding | None:
        for r in sorted(done.snaps):
            fresh = ctx.ref.inputs(done.seeds[r])
            if lay.changed_inputs(block, checked, layout, r, fresh):
                return Finding(
                    guard="input_mutation",
                    message=(
                        "forward changed its inputs during timing: inputs are read-only; write results to new outputs"
                    ),
                )
            ref32, ref64 = ctx.ref.outputs(fresh)
            # the buffers' update now: the next reference forward replaces ctx.ref.state_after
            updates = state_problem(ctx, block, checked, layout, r, shared=False, when="during timing")
            mismatch = checks.timed_output_mismatch(r, done.snaps[r], ref32, ref64, out_tols, tol)
            # precision as on the checked sets, the TF32 signature on a secret third of the samples
            probe = ctx.ref.downgrade_probe(done.seeds[r], ref64) if ref64 and rng.random() < 1 / 3 else None
            _, found = checks.check_set(
                done.seeds[r],
                meta,
                done.snaps[r],
                ref32,
                ref64,
                out_tols,
                tol,
                ctx.ref.fp32,
                ctx.cfg.allow_precision,
                probe=probe,
            )
            del ref32, ref64, probe
            if mismatch:
                return mismatch
            if updates:
                return updates
            failing = [f for f in found if f.severity == "fail"]
            if failing:
                return Finding(guard="precision", message=f"during timing: {failing[0].message}")
        # the parameters the reps share (each rep's own buffers were checked above, call by call)
        written = lay.changed_state(block, checked, layout, ctx.ref.state_dict, copies=False)
        if written:
            return Finding(
                guard="state_write",
                message=(
                    f"forward wrote {', '.join(written)} (a parameter or buffer of Model) during timing: "
                    "parameters are read-only; keep scratch data in allocations of forward's own"
                ),
            )
        return None

    return check


def time_candidate(
    ctx: EvalContext,
    judge: JailedChild,
    plan: dict,
    described: list,
    overhead: Overhead,
    out_tols: dict,
    draft: Draft,
    threads: int,
) -> bool:
    """Time the checked plan; True when it was timed (the baselines follow)."""
    b = candidate_batches(ctx, judge, plan, described)
    check = candidate_check(ctx, plan, out_tols)
    try:
        timing = measure(ctx, b, overhead, draft, check)
    except ShapesVary as e:
        draft.fail("unscorable", str(e))
        return False
    finally:
        ctx.ref.release_cached()
    if timing is None:
        return False
    draft.timed(timing)
    draft.find(*checks.new_threads(threads, judge.threads()))
    if ctx.cfg.baseline_rounds and not draft.failing:
        interleave(ctx, b, overhead, check, draft)
        draft.find(*checks.new_threads(threads, judge.threads()))  # started between the rounds, too
    return draft.status == "correct"


# A baseline beside the candidate may read this much slower than alone before that is a finding:
# honest rounds drift by a few percent; a red-team library left threads spinning between its own
# calls and read 1.11-1.27x faster than eager beside it (0.69-0.92x honestly)
BESIDE_SLACK = 1.25


def keep_faster_alone(ctx: EvalContext, draft: Draft) -> None:
    """After interleave(), with the candidate's processes gone: time each baseline again alone, and
    where it reads faster than beside the candidate, that figure counts. A live judge between its
    own calls can slow what runs beside it (threads, or kernels on a stream of its own), so a
    baseline's figure from beside it is only an upper bound."""
    alone = Draft()
    fill_baselines(ctx, alone, fresh=True)
    for mode in ctx.cfg.baselines:
        beside, solo = draft.baseline_timing(mode), alone.baseline_timing(mode)
        if beside is not None and solo is None:  # nothing vouches for the figure beside it: it does not count
            draft.baseline(mode, None)
            why = "; ".join(alone.notes) or "no figure"
            draft.note(
                f"{mode} was not timed alone after the candidate ({why[-300:]}): its figure beside it, "
                "which the candidate's process could have slowed, does not count"
            )
            continue
        if beside is None or solo is None or solo.median_ms >= beside.median_ms:
            continue
        draft.baseline(mode, solo)
        text = (
            f"{mode} read {beside.median_ms:.4f} ms per call beside the candidate and {solo.median_ms:.4f} ms "
            "alone after it: the figure alone counts"
        )
        if beside.median_ms > BESIDE_SLACK * solo.median_ms:
            text += (
                "; a baseline that much slower beside the candidate points at work its process left running "
                "between its calls (threads, or kernels on a stream of its own): return only when all is done"
            )
            draft.find(Finding(guard="baseline_slowed", severity="warn", message=text))
        else:
            draft.note(text)


def _middle(timings: list[Timing]) -> Timing:
    """The round whose counted figure is the median of the rounds' (the lower one of an even count)."""
    ranked = sorted(timings, key=lambda t: t.counted_ms)
    return ranked[(len(ranked) - 1) // 2]


def interleave(ctx: EvalContext, b: Batches, overhead: Overhead, check: Check, draft: Draft) -> None:
    """`baseline_rounds` rounds of candidate, eager, compile, one after the other: the candidate in
    its judge (its first round is the loop just measured), the baselines in a judge that never
    loads a candidate's library, started now and killed after. Each figure is its median round's;
    the baseline cache is neither read nor written. When a baseline fails here, draft.baselines
    stays None (the caller times them after the candidate's processes are gone)."""
    rounds = max(1, ctx.cfg.baseline_rounds)
    assert draft.timing is not None  # the first round: the batches time_candidate just measured
    times: dict[str, list[Timing]] = {"candidate": [draft.timing]} | {mode: [] for mode in ctx.cfg.baselines}
    base: JailedChild | None = None
    base_overhead: dict[str, Overhead] = {}
    try:
        for r in range(rounds):
            if r:  # the candidate's judge: its failures are the candidate's (runtime_error, raised on)
                timing = measure(ctx, b, overhead, draft, check)
                if timing is None:  # failed, a finding, or not resolved: the first round's figure goes too
                    draft.timed(None)
                    return
                times["candidate"].append(timing)
            try:
                base = base or ctx.spares.start("judge")
                for mode in ctx.cfg.baselines:
                    found, why = _time_reference(ctx, base, mode, base_overhead)
                    if found is None:
                        draft.note(f"{mode} baseline failed beside the candidate: {why}")
                        return
                    times[mode].append(found)
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
        f"{'s' * (rounds != 1)} of {', '.join(times)}, each on fresh inputs, each figure the "
        f"median round's (ms per round: {medians})"
    )


def fill_baselines(ctx: EvalContext, draft: Draft, *, fresh: bool = False) -> int:
    """Fill the draft's eager / compiled figures, timing what the cache lacks (in a judge that never
    loads a candidate's library); returns how many modes were found in the cache. `fresh`: time
    every mode now and neither read nor write the cache."""
    import torch

    device_name = torch.cuda.get_device_name(ctx.device) if ctx.cuda else "cpu"
    judge: JailedChild | None = None
    overheads: dict[str, Overhead] = {}
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
            entry: dict[str, Any] | None = None if fresh else ctx.baseline_cache.get(key, notes)
            cached += entry is not None
            if entry is None:
                judge = judge or ctx.spares.start("judge")
                timing, why = _time_reference(ctx, judge, mode, overheads)
                if timing is None:
                    draft.note(f"{mode} baseline failed: {why}; reward uses what was timed")
                    continue
                entry = {"timing": timing.model_dump(), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
                verify_snapshot(ctx.task)  # never cache a time measured on a changed task copy
                if not fresh:
                    ctx.baseline_cache.put(key, entry)
            if (found := timing_from(entry)) is not None:
                draft.baseline(mode, found)
    except (ChildError, TaskError) as e:
        draft.note(f"baseline process failed: {e}")
    finally:
        for text in notes:
            draft.note(text)
        if judge is not None:
            judge.kill()
            draft.memory("baselines", judge.peak_bytes)
    return cached


def _time_reference(
    ctx: EvalContext, judge: JailedChild, mode: str, overheads: dict[str, Overhead]
) -> tuple[Timing | None, str]:
    """One baseline by the same protocol as the candidate: the overhead calibrated in this judge
    (which never loads a library) on the baseline's own layout, once per judge. With no figure, why
    not: the protocol's own reasons (not timed, judge failed), else the judge's last lines."""
    b = reference_batches(ctx, judge, mode)
    judge.wait_ready()
    if "layout" not in overheads:
        found = calibrate_clock(ctx, judge)
        if found is None:
            return None, judge.log_tail()[-300:]
        overheads["layout"] = found
    scratch = Draft()  # a baseline's failure is a note, not the candidate's finding
    timing = measure(ctx, b, overheads["layout"], scratch)
    ctx.ref.release_cached()
    return timing, "" if timing else "; ".join(scratch.said()) or judge.log_tail()[-300:]
