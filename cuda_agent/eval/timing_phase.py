"""The timing phase of an evaluation: the candidate on input sets correctness never showed, in a
loop the parent's clock brackets, then the eager and torch.compile baselines: cached (timed once
per task, GPU and torch version) during a run; timed again beside the candidate, in interleaved
rounds (candidate, eager, compile), where `baseline_rounds` asks for it (the final re-verification),
so one baseline sample taken hours earlier cannot decide a reward near the 5% line."""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING

from cuda_agent.eval import checks
from cuda_agent.eval.baselines import BaselineCache, timing_from
from cuda_agent.eval.channel import ChildError, JailedChild
from cuda_agent.eval.device_lock import device_lock, nvml_index
from cuda_agent.eval.plan import describe
from cuda_agent.eval.reference import verify_snapshot
from cuda_agent.eval.verdict import Finding, Timing, Verdict
from cuda_agent.task import TaskError

ROTATION_BYTES = 2 << 30  # timing sets that together stay under this are all kept (the budget allowing)

if TYPE_CHECKING:
    from cuda_agent.eval.evaluator import Evaluator


def calibrate(ev: Evaluator, judge: JailedChild) -> None:
    """The judge's cost per timed rep around nothing, by our clock, before any candidate code is
    loaded there (once per evaluator: the machine does not change)."""
    if ev.overhead_ms is not None:
        return
    reps = 50
    t0 = time.perf_counter()
    resp = judge.request({"op": "calibrate", "config": ev.cfg.timing.model_dump(), "reps": reps}, 60)
    if resp.get("ok"):
        ev.overhead_ms = (time.perf_counter() - t0) * 1e3 / reps


def time_candidate(ev: Evaluator, judge: JailedChild, plans: dict[str, dict], out_tols: dict,
                   verdict: Verdict, threads: int) -> list[int]:
    """Time on input sets the correctness phase never showed; returns their seeds. Each set is
    replayed with the plan checked for its input layout (`plans`, from the correctness phase): the
    recorder is not asked again, so a forward that changes what it launches after the checked sets
    changes nothing timed. The judge holds every timing set's inputs and outputs through the loop;
    the parent holds none of them: each set's references are made after the loop, one set at a
    time, and compared with what the judge wrote (inputs are a pure function of their seed)."""
    budget = int(ev.budget_bytes * ev.cfg.memory_fraction)
    per_set = ev.ref.eager_bytes or 2 * ev.ref.input_bytes  # one set in the judge: inputs, outputs
    kept: list[dict] = []
    for _ in range(timing_set_count(per_set, budget, ev.cfg.timing_sets)):
        found = _checked_layout(ev, plans)
        if found is None:
            verdict.status, verdict.error = "unscorable", (
                f"get_inputs() drew no input set of a checked layout in {REDRAWS} tries: a task whose input "
                "shapes vary from draw to draw cannot be timed on the plans its correctness sets checked")
            return []
        kept.append(found)
    ev.ref.release_cached()  # the sets just drawn to describe them: the judge's timing sets need the room
    cfg = ev.cfg.timing
    resp = judge.request({"op": "time_prepare", "sets": [{"seed": k["seed"], "plan": k["plan"]} for k in kept],
                          "config": cfg.model_dump()}, ev.cfg.timeout_s + cfg.warmup_ms / 1e3 * 4)
    if not resp.get("ok"):
        verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
        return []
    per_call = max(float(resp.get("per_call_ms") or 1e-3), 1e-3)
    reps = int(min(cfg.max_reps, max(cfg.min_reps, cfg.budget_ms / per_call)))
    verdict.timing = _timed_loop(ev, judge, reps, verdict)
    if verdict.timing is None:
        return []
    seeds = [k["seed"] for k in kept]
    if ev.cfg.baseline_rounds and not verdict.failing_findings and _both_fit(ev, per_set * len(kept)):
        interleave(ev, judge, reps, seeds, verdict)
        if verdict.status != "correct":
            return []
    files = [checks.output_files(judge.scratch, f"timed{k}", len(s["plan"]["outputs"])) for k, s in enumerate(kept)]
    resp = judge.request({"op": "time_collect", "files": [[str(f) for f in fs] for fs in files]}, ev.cfg.timeout_s)
    if not resp.get("ok"):
        verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
        return []
    verdict.findings += checks.new_threads(threads, judge.threads())
    if resp.get("mutated_sets"):
        verdict.findings.append(Finding(guard="input_mutation", message=(
            "forward changed its inputs during timing: inputs are read-only; write results to new outputs")))
    for k, (fs, s) in enumerate(zip(files, kept)):
        ref32, ref64 = ev.ref.outputs(ev.ref.inputs(s["seed"]))
        bufs = checks.read_outputs(fs, None, ref32)
        mismatch = checks.timed_output_mismatch(k, bufs, ref32, ref64, out_tols, ev.cfg.tolerances)
        del bufs, ref32, ref64
        if mismatch:
            verdict.findings.append(mismatch)
            for f in (f for rest in files[k + 1:] for f in rest):
                f.unlink(missing_ok=True)
            break
    ev.ref.release_cached()  # the baselines' judge starts next: what the comparisons cached
    return seeds


REDRAWS = 20  # fresh draws tried for an input set whose layout a correctness set checked


def _checked_layout(ev: Evaluator, plans: dict[str, dict]) -> dict | None:
    """A fresh seed whose input set has a layout the correctness phase checked, with that plan."""
    for _ in range(REDRAWS):
        seed = secrets.randbits(31)
        inputs = ev.ref.inputs(seed)
        plan = plans.get(repr([describe(x) for x in inputs]))
        del inputs
        if plan is not None:
            return {"seed": seed, "plan": plan}
    return None


def timing_set_count(per_set: int, budget: int, wanted: int) -> int:
    """How many input sets the judge rotates through while timing: `wanted` as far as the budget
    holds them, and two once together they pass ROTATION_BYTES. The judge keeps them all through
    the loop, and at the final re-verification a baselines' judge keeps as many beside it: on
    KernelBench's 6 GB tasks a third set is 12 GiB more in each, and two sets rotate as well."""
    room = min(budget, max(2 * per_set, ROTATION_BYTES))
    return max(1, min(wanted, room // max(per_set, 1)))


def _timed_loop(ev: Evaluator, judge: JailedChild, reps: int, verdict: Verdict) -> Timing | None:
    """One measured loop of the prepared timing sets, bounded by the parent's clock; None (and
    a runtime_error verdict) when the judge failed."""
    cfg = ev.cfg.timing
    with device_lock(ev.cache_dir / "locks", ev.device):
        t0 = time.perf_counter()
        resp = judge.request({"op": "time_loop", "reps": reps, "nvml_index": nvml_index(ev.device)},
                             ev.cfg.timeout_s + cfg.budget_ms / 1e3 * 4)
        wall_ms = (time.perf_counter() - t0) * 1e3
    if not resp.get("ok"):
        verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
        return None
    timing = Timing(**resp["timing"])
    found = {f.guard for f in verdict.findings}
    verdict.findings += [f for f in checks.side_work(timing) + checks.wall_clock_bound(
        timing, wall_ms, reps, ev.overhead_ms, per_rep_slack_ms=0.05 if ev.cuda else 1.0) if f.guard not in found]
    return timing


def _both_fit(ev: Evaluator, judge_bytes: int) -> bool:
    """Whether a baselines' judge (one eager forward per timing set) fits beside the candidate's
    judge, which keeps its timing sets through the rounds."""
    return not ev.cuda or 2 * judge_bytes <= ev.budget_bytes


def _middle(timings: list[Timing]) -> Timing:
    """The round whose median is the median of the rounds' (the lower one of an even count)."""
    ranked = sorted(timings, key=lambda t: t.median_ms)
    return ranked[(len(ranked) - 1) // 2]


def interleave(ev: Evaluator, judge: JailedChild, reps: int, seeds: list[int], verdict: Verdict) -> None:
    """`baseline_rounds` rounds of candidate, eager, compile, one after the other, each under the
    GPU lock: the candidate in its judge (its first round is the loop just measured), the baselines
    on the same input sets in a judge that never loads a candidate's library, started now and
    killed after. Each figure is its median round's; the baseline cache is neither read nor
    written. When a baseline fails here, verdict.baselines stays None (the caller times them
    after the candidate's processes are gone)."""
    rounds = max(1, ev.cfg.baseline_rounds)
    times: dict[str, list[Timing]] = {"candidate": [verdict.timing]} | {mode: [] for mode in ev.cfg.baselines}
    base: JailedChild | None = None
    try:
        for r in range(rounds):
            if r:  # the candidate's judge: its failures are the candidate's (runtime_error, raised on)
                timing = _timed_loop(ev, judge, reps, verdict)
                if timing is None:
                    return
                times["candidate"].append(timing)
            try:
                base = base or ev.spares.start("judge")
                for mode in ev.cfg.baselines:
                    entry = _time_reference(ev, base, seeds, mode)
                    if entry is None:
                        verdict.notes.append(f"{mode} baseline failed beside the candidate: {base.log_tail()[-300:]}")
                        return
                    times[mode].append(Timing(**entry["timing"]))
            except (ChildError, TaskError) as e:
                verdict.notes.append(f"baselines beside the candidate failed: {e}")
                return
    finally:
        if base is not None:
            base.kill()
            if base.peak_bytes:
                verdict.memory_gib["baselines"] = round(base.peak_bytes / 2**30, 3)
    verdict.timing = _middle(times["candidate"])
    verdict.eager = _middle(times["eager"]) if times.get("eager") else None
    verdict.compiled = _middle(times["compile"]) if times.get("compile") else None
    verdict.baselines = "interleaved"
    medians = "; ".join(f"{name} " + "/".join(f"{t.median_ms:.4f}" for t in ts) for name, ts in times.items())
    verdict.notes.append(f"baselines timed again beside the candidate: {rounds} interleaved round"
                         f"{'s' * (rounds != 1)} of {', '.join(times)} on the same input sets, each figure the "
                         f"median round's (ms per round: {medians})")


def fill_baselines(ev: Evaluator, seeds: list[int], verdict: Verdict, *, fresh: bool = False) -> int:
    """Fill verdict.eager / verdict.compiled, timing what the cache lacks (in a judge that never
    loads a candidate's library); returns how many modes were found in the cache. `fresh`: time
    every mode now and neither read nor write the cache."""
    import torch

    device_name = torch.cuda.get_device_name(ev.device) if ev.cuda else "cpu"
    judge: JailedChild | None = None
    cached = 0
    verdict.baselines = "fresh" if fresh else "cached"
    try:
        for mode in ev.cfg.baselines:
            key = BaselineCache.key(ev.task.source_hash, device_name, torch.__version__, ev.ref.dtypes,
                                    mode if mode == "eager" else f"compile:{ev.cfg.compile_mode}",
                                    ev.cfg.timing)
            entry = None if fresh else ev.baseline_cache.get(key, verdict.notes)
            cached += entry is not None
            if entry is None:
                judge = judge or ev.spares.start("judge")
                entry = _time_reference(ev, judge, seeds, mode)
                if entry is None:
                    verdict.notes.append(f"{mode} baseline failed: {judge.log_tail()[-300:]}; reward uses what was timed")
                    continue
                verify_snapshot(ev.task)  # never cache a time measured on a changed task copy
                if not fresh:
                    ev.baseline_cache.put(key, entry)
            if mode == "eager":
                verdict.eager = timing_from(entry)
            else:
                verdict.compiled = timing_from(entry)
    except (ChildError, TaskError) as e:
        verdict.notes.append(f"baseline process failed: {e}")
    finally:
        if judge is not None:
            judge.kill()
            if judge.peak_bytes:
                verdict.memory_gib["baselines"] = round(judge.peak_bytes / 2**30, 3)
    return cached


def _time_reference(ev: Evaluator, judge: JailedChild, seeds: list[int], mode: str) -> dict | None:
    with device_lock(ev.cache_dir / "locks", ev.device):
        resp = judge.request(
            {"op": "time_reference", "seeds": seeds, "config": ev.cfg.timing.model_dump(),
             "compile_mode": None if mode == "eager" else ev.cfg.compile_mode,
             "nvml_index": nvml_index(ev.device)}, ev.cfg.baseline_timeout_s)
    if not resp.get("ok"):
        return None
    return {"timing": resp["timing"], "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
