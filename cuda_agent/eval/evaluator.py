"""The Evaluator: one task, many candidates. Builds, checks, times and scores each candidate.

Three kinds of process, and no process that ever ran candidate Python holds judge code or state
(docs/harness.md, "The trust boundary"):

- this one, the parent: static guards, the build and the audit of the built library, the
  reference outputs (from a private copy of the task), every comparison, the wall clock bound,
  the baselines cache and the reward. No candidate code ever runs here.
- the recorder (recorder.py, jailed, no GPU): imports model_new.py and writes down what forward
  does, per input set, as a plan (plan.py), which the parent checks.
- the judge (judge.py, jailed): never imports model_new.py; loads the built library and replays
  the checked plans on memory the parent lends it per call (handover.py): inputs, parameters and
  allocations the parent made and reads back itself. Once the library is loaded, the judge's
  process is the candidate's: nothing it reports decides a verdict.

Order of one evaluation: static guards -> build -> native audit -> record the first set's plan ->
calibrate the parent's clock on its layout (before the library is loaded) -> n input sets (fresh
seeds; references here; outputs, inputs and parameters read and compared here) -> timing of the
checked plan in batches of fresh inputs the parent's clock measures (sampled outputs checked) ->
baselines the same way (cached; or beside the candidate: EvalConfig.baseline_rounds) -> milestone reward.

This module holds the order; the steps live beside it and see only what they need: an
EvalContext (context.py: the task, its reference, the settings, the processes, the budgets) and
the Draft of the verdict (draft.py, the one writer of a verdict: phases report to it, it scores).
The steps: spares.py (the recorder and judge processes), recording.py (plans), correctness_phase.py,
timing_phase.py (candidate and baselines; clocked.py, batch.py and handover.py: the parent's clock,
the batches' layout and the memory lent); what the parent and those processes say to each other
is typed in protocol.py.
"""

from __future__ import annotations

import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from cuda_agent.eval import checks, handover
from cuda_agent.eval.baselines import BaselineCache
from cuda_agent.eval.channel import ChildError, JailedChild
from cuda_agent.eval.context import EvalContext
from cuda_agent.eval.correctness_phase import check_sets, first_set
from cuda_agent.eval.draft import Draft
from cuda_agent.eval.guards.static import check_build_inputs, check_candidate_static
from cuda_agent.eval.protocol import LoadLibrary
from cuda_agent.eval.recording import load_recorder, record_only
from cuda_agent.eval.reference import Reference, snapshot_task
from cuda_agent.eval.scratch import sweep_stale
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.spares import Ahead, Spares
from cuda_agent.eval.task_code import TaskCodeError, is_out_of_memory
from cuda_agent.eval.timing_phase import calibrate_clock, fill_baselines, keep_faster_alone, time_candidate
from cuda_agent.eval.verdict import Finding, Verdict
from cuda_agent.filenames import candidate_symlinks
from cuda_agent.jail import JailUnavailable, jail_problem
from cuda_agent.task import Task, TaskError


class CandidateError(ValueError):
    """The candidate folder is not in the expected layout."""


class Evaluator:
    def __init__(self, task: Task, cfg: EvalConfig | None = None, *, ahead: Ahead = "keep"):
        self.ctx: EvalContext | None = None  # what the phases read; None while the task cannot be scored
        self.cfg = cfg or EvalConfig()
        self.device = self.cfg.device
        self.cuda = self.device.startswith("cuda")
        self.cache_dir = self.cfg.cache_root()
        (self.cache_dir / "build").mkdir(parents=True, exist_ok=True)
        sweep_stale()  # what evaluators killed before they could clean up left in the temp folder
        self.task = snapshot_task(task)  # the reference never reads the workspace again
        self.refusal = jail_problem() if self.cfg.sandbox else None
        self.spares = Spares(self.task, self.cfg, self.cache_dir, ahead="none" if self.refusal else ahead)
        self.baseline_cache = BaselineCache(self.cache_dir / "baselines.json")
        self.unscorable: str | None = None  # why no candidate can be scored on this task, if it can't
        # The evaluation's memory budget, fixed now: what a plan may allocate and how many timing sets
        # the judge holds are shares of it, not of what is free later (less while this evaluation's
        # own processes hold memory, which once rejected an honest candidate's 7.5 GB output).
        budget = 8 << 30  # host-only test kernels
        ref: Reference | None = None
        try:
            if self.cuda:
                import torch

                free = torch.cuda.mem_get_info(self.device)[0]
                cap = self.cfg.memory_budget_gib
                budget = min(free, int(cap * 2**30)) if cap else free
            ref = Reference(self.task, self.device, self.cfg.init_seed, self.cfg.timeout_s)
            self.unscorable = ref.determinism_problem(secrets.randbits(31)) or ref.parameter_problem()
            if self.cuda and not self.unscorable:
                self.unscorable = checks.memory_problem(ref.eager_bytes, budget)
        except TaskCodeError as e:  # the task's own code raised, hung or ran out of memory
            self.unscorable = str(e)
        if ref is not None:
            # every plan is checked against each parameter's and buffer's storage size
            self.ctx = EvalContext(
                task=self.task,
                cfg=self.cfg,
                ref=ref,
                spares=self.spares,
                cache_dir=self.cache_dir,
                budget_bytes=budget,
                baseline_cache=self.baseline_cache,
                state_nbytes={k: v.untyped_storage().nbytes() for k, v in ref.state_dict.items()},
            )
        if self.unscorable:
            self.spares.close()  # no candidate will be judged: give their processes' memory back
        self.phases = dict  # makes evaluate()'s phase timings; cuda_agent/progress.py's shows each as it ends

    @property
    def cfg(self) -> EvalConfig:
        return self._cfg

    @cfg.setter
    def cfg(self, cfg: EvalConfig) -> None:
        """Settings for the evaluations that follow (a benchmark raises baseline_rounds between two)."""
        self._cfg = cfg
        if self.ctx is not None:
            self.ctx.cfg = cfg

    @property
    def ref(self) -> Reference | None:
        """The parent's reference (None when the task's own code failed to build it)."""
        return self.ctx.ref if self.ctx else None

    # -- public --------------------------------------------------------------------------
    def evaluate(self, candidate_dir: Path, *, timing: bool = True) -> Verdict:
        """The full verdict; `timing=False` stops after correctness (a quicker check, reward
        then counts the candidate as not faster)."""
        t_start = time.perf_counter()
        candidate_dir = Path(candidate_dir).resolve()
        if self.cuda:  # verdict.memory_gib["parent"]: this evaluation's peak, not the evaluator's
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)
        handover.held.reset_peak()
        seconds: dict[str, float] = self.phases()
        if self.refusal:
            return Verdict(status="error", error=self.refusal)
        if self.unscorable or self.ctx is None:
            return Verdict(status="unscorable", error=self.unscorable)
        if not (candidate_dir / "model_new.py").is_file():
            return Verdict(
                status="error", error=f"{candidate_dir} has no model_new.py (see docs/kernels.md for the layout)"
            )
        ctx = self.ctx
        draft = Draft(
            findings=check_candidate_static(
                candidate_dir, task_fp32=ctx.ref.fp32, allow_precision=self.cfg.allow_precision
            )
        )
        seconds["static"] = time.perf_counter() - t_start
        if candidate_symlinks(candidate_dir):  # not built, not read: see filenames.candidate_symlinks
            return self._scored(draft, seconds, t_start)

        build, err = checks.build(candidate_dir, self.cache_dir / "build", self.cfg.arch)
        seconds["build"] = build.seconds if build else 0.0
        draft.judged(checks.judged_files(candidate_dir, build))
        if err:
            draft.fail("compile_error", err)
            return self._scored(draft, seconds, t_start)
        if build is None:
            draft.find(
                Finding(
                    guard="no_kernel",
                    message=("the candidate has no kernels/*.cu: forward must call launchers of your own kernels"),
                )
            )
            record_only(ctx, candidate_dir, draft)  # names the torch compute forward did instead
            return self._scored(draft, seconds, t_start)
        t = time.perf_counter()
        # the source rules over what else nvcc read too (an #include a macro names, impl.inc)
        draft.find(
            *check_build_inputs(
                candidate_dir, build.inputs, task_fp32=ctx.ref.fp32, allow_precision=self.cfg.allow_precision
            )
        )
        draft.find(*checks.audit_native(build, self.cfg.native_symbols))
        seconds["audit"] = time.perf_counter() - t

        for text in ctx.ref.notes:
            draft.note(text)
        if not self.cfg.sandbox:
            draft.note("evaluated without the jail (--no-sandbox)")
        try:
            recorder, judge = self.spares.take("recorder"), self.spares.take("judge")
        except TaskError as e:  # the judge's copy of the task no longer hashes to what was snapshotted
            draft.fail("error", str(e))
            return self._scored(draft, seconds, t_start)
        timed = False
        try:
            timed = self._run(recorder, judge, candidate_dir, build, draft, seconds, timing)
        except ChildError as e:
            draft.fail("timeout" if e.kind == "timeout" else "runtime_error", str(e))
        except TaskCodeError as e:  # the reference failed on a fresh input set: no candidate can pass
            draft.fail("unscorable", str(e))
            self.unscorable = str(e)
        except Exception as e:
            if not is_out_of_memory(e):
                raise
            draft.fail(
                "error",
                f"out of GPU memory in the parent (references and comparisons): "
                f"{str(e).splitlines()[0]}; free the GPU of other processes or lower eval.n_sets / "
                "eval.timing.max_batch_reps",
            )
        finally:
            t = time.perf_counter()
            recorder.kill()
            judge.kill()
            seconds["kill"] = time.perf_counter() - t
            draft.memory("judge", judge.peak_bytes)
        if timed and draft.ok:
            # after the candidate's processes are gone: their GPU memory is free for the baselines'
            t = time.perf_counter()
            if draft.baselines is None:  # not timed beside the candidate (timing_phase.interleave)
                fill_baselines(ctx, draft, fresh=bool(self.cfg.baseline_rounds))
            elif draft.baselines == "interleaved":  # and alone, now that the candidate's processes are gone
                keep_faster_alone(ctx, draft)
            seconds["baselines"] = time.perf_counter() - t
        return self._scored(draft, seconds, t_start)

    def describe_task(self) -> dict:
        """The task for records: Reference.describe(), or what is known without running it."""
        if self.ctx is not None:
            return self.ctx.ref.describe()
        return {"path": str(self.task.path), "class": self.task.class_name, "hash": self.task.source_hash}

    def time_baselines(self) -> tuple[Verdict, int]:
        """Eager and torch.compile alone (`cuda-agent baselines`), on fresh input sets, through the
        same cache an evaluation uses: (a verdict holding `eager`/`compiled`, modes found cached)."""
        if self.refusal:
            return Verdict(status="error", error=self.refusal), 0
        if self.unscorable or self.ctx is None:
            return Verdict(status="unscorable", error=self.unscorable), 0
        draft = Draft()
        cached = fill_baselines(self.ctx, draft)
        return draft.score({}), cached

    def close(self) -> None:
        self.spares.close()
        shutil.rmtree(self.task.path.parent, ignore_errors=True)  # the private snapshot of the task

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- steps ---------------------------------------------------------------------------
    def _run(
        self,
        recorder: JailedChild,
        judge: JailedChild,
        candidate_dir: Path,
        build: Any,
        draft: Draft,
        seconds: dict,
        timing: bool,
    ) -> bool:
        """Correctness, then timing; True when the candidate was timed (the baselines follow)."""
        assert self.ctx is not None  # evaluate() runs no step without a reference
        ctx = self.ctx
        t = time.perf_counter()
        recorder.wait_ready()
        ready = judge.wait_ready()
        seconds["start_wait"] = time.perf_counter() - t
        # how long the judge took to start (torch import, context, task, warm-ups): benchmarks read it
        seconds["judge_ready_after"] = ready.since_exec
        for k, v in ready.started.items():
            seconds[f"judge_start_{k}"] = v
        t = time.perf_counter()
        spec = checks.spec(build)
        if not load_recorder(ctx, recorder, candidate_dir, spec, draft):
            return False
        first = first_set(ctx, recorder, spec, draft)
        if first is None:
            return False
        # the parent's clock, calibrated on the plan's layout while the judge holds no candidate code
        overhead = calibrate_clock(ctx, judge, first.plan, first.described) if timing else None
        if timing and overhead is None:
            draft.fail("error", f"the judge failed while the harness calibrated its clock{judge.log_tail()}")
            return False
        threads = judge.threads()
        resp = judge.request(LoadLibrary(build_dir=str(build.out_dir)), self.cfg.timeout_s)
        seconds["load"] = time.perf_counter() - t
        if not resp.ok:
            draft.fail("runtime_error", resp.error_text())
            return False
        t = time.perf_counter()
        out_tols = check_sets(ctx, recorder, judge, build, spec, draft, threads, first)
        seconds["correctness"] = time.perf_counter() - t
        if not draft.ok or not timing or overhead is None:
            return False
        t = time.perf_counter()
        timed = time_candidate(ctx, judge, first.plan, first.described, overhead, out_tols, draft, threads)
        seconds["timing"] = time.perf_counter() - t
        return timed

    def _scored(self, draft: Draft, seconds: dict, t_start: float) -> Verdict:
        if self.cuda:
            import torch

            draft.memory("parent", torch.cuda.max_memory_allocated(self.device))
        draft.memory("blocks", handover.held.peak)  # lent to the judge: the parent's memory, outside torch's count
        seconds["total"] = time.perf_counter() - t_start
        return draft.score(seconds)


__all__ = ["CandidateError", "Evaluator", "JailUnavailable"]
