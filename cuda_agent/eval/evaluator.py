"""The Evaluator: one task, many candidates. Builds, checks, times and scores each candidate.

Three kinds of process, and no process that ever ran candidate Python holds judge code or state
(docs/harness.md, "The trust boundary"):

- this one, the parent: static guards, the build and the audit of the built library, the
  reference outputs (from a private copy of the task), every comparison, the wall clock bound,
  the baselines cache and the reward. No candidate code ever runs here.
- the recorder (recorder.py, jailed, no GPU): imports model_new.py and writes down what forward
  does, per input set, as a plan (plan.py), which the parent checks.
- the judge (judge.py, jailed): never imports model_new.py; loads the built library and replays
  the plans on inputs it draws from the parent's seeds; outputs come back as raw bytes.

Order of one evaluation: static guards -> build -> native audit -> record plans -> n input sets
(fresh seeds; reference here; outputs poisoned and compared here; inputs checked for mutation)
-> timing on fresh sets (a loop the parent's clock brackets; the timed outputs checked too)
-> baselines (cached) -> milestone reward.
"""

from __future__ import annotations

import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from cuda_agent.eval import checks
from cuda_agent.eval.baselines import BaselineCache, default_cache_dir, timing_from
from cuda_agent.eval.channel import ChildError, JailedChild
from cuda_agent.eval.device_lock import device_lock, nvml_index
from cuda_agent.eval.dynamic_guards import judge_aten, judge_kernels
from cuda_agent.eval.guards.static import check_candidate_static
from cuda_agent.eval.plan import Plan, check_plan, describe, tensor_nbytes
from cuda_agent.eval.reference import Reference, snapshot_task, tensors_bytes, verify_snapshot
from cuda_agent.eval.reward import milestone_reward, speedup
from cuda_agent.eval.scratch import private_dir, sweep_stale
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.verdict import Finding, SetResult, Timing, Verdict
from cuda_agent.jail import Jail, JailUnavailable, jail_problem
from cuda_agent.task import Task, TaskError


class CandidateError(ValueError):
    """The candidate folder is not in the expected layout."""


class Evaluator:
    def __init__(self, task: Task, cfg: EvalConfig | None = None, *, warm: bool = True):
        self.cfg = cfg or EvalConfig()
        self.device = self.cfg.device
        self.cuda = self.device.startswith("cuda")
        self.cache_dir = Path(self.cfg.cache_dir or default_cache_dir())
        (self.cache_dir / "build").mkdir(parents=True, exist_ok=True)
        sweep_stale()  # what evaluators killed before they could clean up left in the temp folder
        self.task = snapshot_task(task)  # the reference never reads the workspace again
        self.warm = warm
        self.refusal = jail_problem() if self.cfg.sandbox else None
        # processes started ahead of need, per kind: a recorder or judge takes 4-7 s to start (the
        # torch import), longer than an agent's step, so more than one waits
        self._spares: dict[str, list[JailedChild]] = {"judge": [], "recorder": []}
        if warm and not self.refusal:
            spares = self.cfg.spares if self.cfg.spares is not None else (2 if self.cuda else 1)
            for _ in range(spares):
                for kind in self._spares:
                    self._spares[kind].append(self._start(kind))
        self.ref = Reference(self.task, self.device, self.cfg.init_seed)
        # what every plan is checked against: each parameter's and buffer's storage size
        self._state_nbytes = {k: v.untyped_storage().nbytes() for k, v in self.ref.state_dict.items()}
        self.unscorable = self.ref.determinism_problem(secrets.randbits(31))
        self.baseline_cache = BaselineCache(self.cache_dir / "baselines.json")
        self._overhead_ms: float | None = None  # the judge's cost per timed rep, by our clock

    # -- processes -------------------------------------------------------------------------
    def _start(self, kind: str) -> JailedChild:
        scratch = private_dir(kind)
        if kind == "recorder":
            jail = Jail(writable=[scratch], cwd=scratch, address_space=32 << 30, enabled=self.cfg.sandbox)
            return JailedChild("cuda_agent.eval.recorder", [], jail, scratch)
        verify_snapshot(self.task)  # the judge loads the copy again: it must still be what was hashed
        task_dir = self.task.path.parent
        jail = Jail(writable=[scratch], readable=[task_dir, self.cache_dir / "build"], gpu=self.cuda, cwd=scratch,
                    enabled=self.cfg.sandbox)
        args = ["--device", self.device, "--task", f"{self.task.path}::{self.task.class_name}",
                "--init-seed", str(self.cfg.init_seed), "--task-hash", self.task.source_hash]
        if self.task.inputs_path:
            args += ["--inputs", str(self.task.inputs_path)]
        if self.cfg.trace_kernels:
            args += ["--trace"]
        return JailedChild("cuda_agent.eval.judge", args, jail, scratch)

    def _take(self, kind: str) -> JailedChild:
        """The longest-waiting process; a new one starts now, so one is ready by a later evaluation."""
        queue = self._spares[kind]
        child = queue.pop(0) if queue else None
        if self.warm and not self.refusal:
            queue.append(self._start(kind))
        if child is None or not child.alive():
            if child is not None:
                child.kill()
            child = self._start(kind)
        return child

    # -- public --------------------------------------------------------------------------
    def evaluate(self, candidate_dir: Path, *, timing: bool = True) -> Verdict:
        """The full verdict; `timing=False` stops after correctness (a quicker check, reward
        then counts the candidate as not faster)."""
        t_start = time.perf_counter()
        candidate_dir = Path(candidate_dir).resolve()
        seconds: dict[str, float] = {}
        if self.refusal:
            return Verdict(status="error", error=self.refusal)
        if self.unscorable:
            return Verdict(status="unscorable", error=self.unscorable)
        if not (candidate_dir / "model_new.py").is_file():
            return Verdict(status="error", error=f"{candidate_dir} has no model_new.py (see docs/kernels.md for the layout)")
        findings = check_candidate_static(candidate_dir, task_fp32=self.ref.fp32, allow_precision=self.cfg.allow_precision)
        seconds["static"] = time.perf_counter() - t_start

        build, err = checks.build(candidate_dir, self.cache_dir / "build", self.cfg.arch)
        seconds["build"] = build.seconds if build else 0.0
        if err:
            return self._finish(Verdict(status="compile_error", error=err, findings=findings), seconds, t_start)
        if build is None:
            findings.append(Finding(guard="no_kernel", message=(
                "the candidate has no kernels/*.cu: forward must call launchers of your own kernels")))
            verdict = Verdict(status="correct", findings=findings)
            self._record_only(candidate_dir, verdict)  # names the torch compute forward did instead
            return self._scored(verdict, seconds, t_start)
        t = time.perf_counter()
        findings += checks.audit_native(build, self.cfg.native_symbols)
        seconds["audit"] = time.perf_counter() - t

        verdict = Verdict(status="correct", findings=findings, notes=list(self.ref.notes))
        if not self.cfg.sandbox:
            verdict.notes.append("evaluated without the jail (--no-sandbox)")
        try:
            recorder, judge = self._take("recorder"), self._take("judge")
        except TaskError as e:  # the judge's copy of the task no longer hashes to what was snapshotted
            verdict.status, verdict.error = "error", str(e)
            return self._scored(verdict, seconds, t_start)
        try:
            self._run(recorder, judge, candidate_dir, build, verdict, seconds, timing)
        except ChildError as e:
            verdict.status = "timeout" if e.kind == "timeout" else "runtime_error"
            verdict.error = str(e)
        finally:
            t = time.perf_counter()
            recorder.kill()
            judge.kill()
            seconds["kill"] = time.perf_counter() - t
        return self._scored(verdict, seconds, t_start)

    def time_baselines(self) -> tuple[Verdict, int]:
        """Eager and torch.compile alone (`cuda-agent baselines`), on fresh input sets, through the
        same cache an evaluation uses: (a verdict holding `eager`/`compiled`, modes found cached)."""
        verdict = Verdict(status="correct")
        if self.refusal:
            return Verdict(status="error", error=self.refusal), 0
        seeds = [secrets.randbits(31) for _ in range(self.cfg.timing_sets)]
        return verdict, self._baselines(seeds, verdict)

    def close(self) -> None:
        for queue in self._spares.values():
            while queue:
                queue.pop().close()
        shutil.rmtree(self.task.path.parent, ignore_errors=True)  # the private snapshot of the task

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- steps ---------------------------------------------------------------------------
    def _run(self, recorder: JailedChild, judge: JailedChild, candidate_dir: Path, build: Any, verdict: Verdict,
             seconds: dict, timing: bool) -> None:
        t = time.perf_counter()
        recorder.wait_ready()
        ready = judge.wait_ready()
        seconds["start_wait"] = time.perf_counter() - t
        # how long the judge took to start (torch import, context, task, warm-ups): benchmarks read it
        seconds["judge_ready_after"] = float(ready.get("since_exec", 0.0))
        for k, v in (ready.get("started") or {}).items():
            seconds[f"judge_start_{k}"] = float(v)
        t = time.perf_counter()
        self._calibrate(judge)
        spec = checks.spec(build)
        if not self._load_recorder(recorder, candidate_dir, spec, verdict):
            return
        threads = judge.threads()
        resp = judge.request({"op": "load_library", "build_dir": str(build.out_dir)}, self.cfg.timeout_s)
        seconds["load"] = time.perf_counter() - t
        if not resp.get("ok"):
            verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
            return
        t = time.perf_counter()
        out_tols = self._correctness(recorder, judge, build, spec, verdict, threads)
        seconds["correctness"] = time.perf_counter() - t
        if verdict.status != "correct" or verdict.failing_findings or not timing:
            return
        t = time.perf_counter()
        seeds = self._time_candidate(recorder, judge, spec, out_tols, verdict, threads)
        seconds["timing"] = time.perf_counter() - t
        if verdict.status == "correct" and not verdict.failing_findings:
            t = time.perf_counter()
            self._baselines(seeds, verdict)
            seconds["baselines"] = time.perf_counter() - t

    def _load_recorder(self, recorder: JailedChild, candidate_dir: Path, spec: dict, verdict: Verdict) -> bool:
        resp = recorder.request({
            "op": "load", "source": (candidate_dir / "model_new.py").read_text(errors="replace"), "spec": spec,
            "init_inputs": [describe(x) for x in self.ref.init_inputs], "init_seed": self.cfg.init_seed,
            "state": sorted(self.ref.state_dict)}, self.cfg.timeout_s)
        if not resp.get("ok"):
            verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
        return bool(resp.get("ok"))

    def _record_only(self, candidate_dir: Path, verdict: Verdict) -> None:
        recorder = self._take("recorder")
        try:
            if self._load_recorder(recorder, candidate_dir, {}, verdict):
                inputs = self.task.draw_inputs(secrets.randbits(31), self.device)
                self._plan(recorder, [describe(x) for x in inputs], {}, verdict)
        except ChildError as e:
            verdict.notes.append(f"forward could not be recorded: {e}")
        finally:
            recorder.kill()

    def _plan(self, recorder: JailedChild, described: list, spec: dict, verdict: Verdict) -> dict | None:
        """Record forward on one input set's layout (`described`); the plan once checked, or None with
        the verdict saying why. Torch compute is a problem like any other: a replay would leave it out."""
        resp = recorder.request({"op": "record", "inputs": described}, self.cfg.timeout_s)
        if resp.get("plan") is None:
            verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
            return None
        problems = [Finding(guard=g, message=m) for g, m in resp.get("problems", [])]
        problems += judge_aten(resp.get("compute", []))
        foreign = [d for d in resp.get("devices", []) if d != self.device.split(":")[0]]
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
                    plan, spec, [tensor_nbytes(d) for d in described], self._state_nbytes,
                    checks.memory_budget(self.device, self.cfg.memory_fraction))]
                if not any(s.op == "call" for s in plan.steps):
                    problems.append(Finding(guard="no_kernel", message=(
                        "forward called none of your launchers: all work must be done by your own kernels")))
        for f in problems:
            if f not in verdict.findings:
                verdict.findings.append(f)
        return plan.model_dump() if resp.get("ok") and not problems else None

    def _correctness(self, recorder: JailedChild, judge: JailedChild, build: Any, spec: dict, verdict: Verdict,
                     threads: int) -> dict:
        """Run every input set; return the per-output tolerances (tightened by the zero trap)."""
        tol = self.cfg.tolerances
        out_tols: dict[int, Any] = {}
        plans: dict[str, dict] = {}
        for i in range(self.cfg.n_sets):
            seed = secrets.randbits(31)
            inputs = self.task.draw_inputs(seed, self.device)
            described = [describe(x) for x in inputs]
            plan = self._plan(recorder, described, spec, verdict)
            if plan is None:
                verdict.status = "guard_violation" if verdict.status == "correct" else verdict.status
                return out_tols
            if plans.setdefault(repr(described), plan) != plan:
                verdict.findings.append(Finding(guard="plan", message=(
                    "forward launched different work for inputs of the same shapes: forward must be a function of "
                    "its inputs (no state kept between calls)")))
            ref32, ref64 = self.ref.outputs(inputs)
            del inputs
            if i == 0:
                for j, (r, r64) in enumerate(zip(ref32, ref64 or ref32)):
                    out_tols[j], note = checks.zero_trap(r, r64, tol)
                    if note:
                        verdict.notes.append(f"output {j}: {note}")
            files = checks.output_files(judge.scratch, f"set{i}", len(ref32))
            resp = judge.request({"op": "run", "plan": plan, "seed": seed, "files": [str(f) for f in files],
                                  "trace": i == 0 and self.cuda and self.cfg.trace_kernels}, self.cfg.timeout_s)
            if not resp.get("ok"):
                verdict.sets.append(SetResult(seed=seed, ok=False, error=checks.error_text(resp)))
                verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
                return out_tols
            if resp.get("kernels"):
                verdict.findings += judge_kernels(resp["kernels"], checks.own_kernels(build), checks.libraries(build),
                                                  allowed_torch=True)
            verdict.findings += checks.new_threads(threads, judge.threads())
            bufs = checks.read_outputs(files, resp.get("outputs", []), ref32)
            result = checks.judge_set(seed, resp, bufs, ref32, ref64, out_tols, tol, self.ref.fp32,
                                      self.cfg.allow_precision, verdict)
            if resp.get("mutated"):
                verdict.findings.append(Finding(guard="input_mutation", message=(
                    f"forward changed its input(s) {resp['mutated']}: inputs are read-only; write results to new outputs")))
                result.ok = False
            verdict.sets.append(result)
            if not result.ok:
                verdict.status = "incorrect"
            del bufs, ref32, ref64
        return out_tols

    def _calibrate(self, judge: JailedChild) -> None:
        """The judge's cost per timed rep around nothing, by our clock, before any candidate code is
        loaded there (once per evaluator: the machine does not change)."""
        if self._overhead_ms is not None:
            return
        reps = 50
        t0 = time.perf_counter()
        resp = judge.request({"op": "calibrate", "config": self.cfg.timing.model_dump(), "reps": reps}, 60)
        if resp.get("ok"):
            self._overhead_ms = (time.perf_counter() - t0) * 1e3 / reps

    def _time_candidate(self, recorder: JailedChild, judge: JailedChild, spec: dict, out_tols: dict,
                        verdict: Verdict, threads: int) -> list[int]:
        """Time on input sets the correctness phase never showed; returns their seeds."""
        budget = checks.memory_budget(self.device, self.cfg.memory_fraction)
        kept: list[dict] = []
        for _ in range(self.cfg.timing_sets):
            seed = secrets.randbits(31)
            inputs = self.task.draw_inputs(seed, self.device)
            plan = self._plan(recorder, [describe(x) for x in inputs], spec, verdict)
            if plan is None:
                verdict.status = "guard_violation" if verdict.status == "correct" else verdict.status
                return []
            ref32, ref64 = self.ref.outputs(inputs)
            per_set = tensors_bytes(inputs) + tensors_bytes(ref32) + 2 * tensors_bytes(ref64 or [])
            del inputs
            if kept and per_set * (len(kept) + 1) > budget:
                break
            kept.append({"seed": seed, "plan": plan, "ref32": ref32, "ref64": ref64})
        cfg = self.cfg.timing
        resp = judge.request({"op": "time_prepare", "sets": [{"seed": k["seed"], "plan": k["plan"]} for k in kept],
                              "config": cfg.model_dump()}, self.cfg.timeout_s + cfg.warmup_ms / 1e3 * 4)
        if not resp.get("ok"):
            verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
            return []
        per_call = max(float(resp.get("per_call_ms") or 1e-3), 1e-3)
        reps = int(min(cfg.max_reps, max(cfg.min_reps, cfg.budget_ms / per_call)))
        with device_lock(self.cache_dir / "locks", self.device):
            t0 = time.perf_counter()
            resp = judge.request({"op": "time_loop", "reps": reps, "nvml_index": nvml_index(self.device)},
                                 self.cfg.timeout_s + cfg.budget_ms / 1e3 * 4)
            wall_ms = (time.perf_counter() - t0) * 1e3
        if not resp.get("ok"):
            verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
            return []
        timing = Timing(**resp["timing"])
        verdict.timing = timing
        verdict.findings += checks.side_work(timing)
        verdict.findings += checks.wall_clock_bound(timing, wall_ms, reps, self._overhead_ms,
                                                    per_rep_slack_ms=0.05 if self.cuda else 1.0)
        files = [checks.output_files(judge.scratch, f"timed{k}", len(s["ref32"])) for k, s in enumerate(kept)]
        resp = judge.request({"op": "time_collect", "files": [[str(f) for f in fs] for fs in files]}, self.cfg.timeout_s)
        if not resp.get("ok"):
            verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
            return []
        verdict.findings += checks.new_threads(threads, judge.threads())
        if resp.get("mutated_sets"):
            verdict.findings.append(Finding(guard="input_mutation", message=(
                "forward changed its inputs during timing: inputs are read-only; write results to new outputs")))
        bufs = [checks.read_outputs(fs, None, s["ref32"]) for fs, s in zip(files, kept)]
        verdict.findings += checks.timed_outputs(bufs, kept, out_tols, self.cfg.tolerances)
        return [k["seed"] for k in kept]

    def _baselines(self, seeds: list[int], verdict: Verdict) -> int:
        """Fill verdict.eager / verdict.compiled, timing what the cache lacks (in a judge that never
        loads a candidate's library); returns how many modes were found in the cache."""
        import torch

        device_name = torch.cuda.get_device_name(self.device) if self.cuda else "cpu"
        judge: JailedChild | None = None
        cached = 0
        try:
            for mode in self.cfg.baselines:
                key = BaselineCache.key(self.task.source_hash, device_name, torch.__version__, self.ref.dtypes,
                                        mode if mode == "eager" else f"compile:{self.cfg.compile_mode}")
                entry = self.baseline_cache.get(key, verdict.notes)
                cached += entry is not None
                if entry is None:
                    judge = judge or self._start("judge")
                    entry = self._time_reference(judge, seeds, mode)
                    if entry is None:
                        verdict.notes.append(f"{mode} baseline failed: {judge.log_tail()[-300:]}; reward uses what was timed")
                        continue
                    verify_snapshot(self.task)  # never cache a time measured on a changed task copy
                    self.baseline_cache.put(key, entry)
                if mode == "eager":
                    verdict.eager = timing_from(entry)
                else:
                    verdict.compiled = timing_from(entry)
        except (ChildError, TaskError) as e:
            verdict.notes.append(f"baseline process failed: {e}")
        finally:
            if judge is not None:
                judge.kill()
        return cached

    def _time_reference(self, judge: JailedChild, seeds: list[int], mode: str) -> dict | None:
        with device_lock(self.cache_dir / "locks", self.device):
            resp = judge.request(
                {"op": "time_reference", "seeds": seeds, "config": self.cfg.timing.model_dump(),
                 "compile_mode": None if mode == "eager" else self.cfg.compile_mode,
                 "nvml_index": nvml_index(self.device)}, self.cfg.baseline_timeout_s)
        if not resp.get("ok"):
            return None
        return {"timing": resp["timing"], "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}

    def _scored(self, verdict: Verdict, seconds: dict, t_start: float) -> Verdict:
        guard_failed = bool(verdict.failing_findings)
        if verdict.status == "correct" and guard_failed:
            verdict.status = "guard_violation"
        verdict.correct = verdict.status == "correct"
        t = verdict.timing.median_ms if verdict.timing else None
        te = verdict.eager.median_ms if verdict.eager else None
        tc = verdict.compiled.median_ms if verdict.compiled else None
        if verdict.correct and t:
            verdict.speedup_vs_eager = speedup(te, t) if te else None
            verdict.speedup_vs_compile = speedup(tc, t) if tc else None
        verdict.reward = milestone_reward(verdict.correct, guard_failed, t, te, tc)
        return self._finish(verdict, seconds, t_start)

    @staticmethod
    def _finish(verdict: Verdict, seconds: dict, t_start: float) -> Verdict:
        seconds["total"] = time.perf_counter() - t_start
        verdict.seconds = {k: round(v, 4) for k, v in seconds.items()}
        return verdict


__all__ = ["CandidateError", "Evaluator", "JailUnavailable"]
