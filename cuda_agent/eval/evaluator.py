"""The Evaluator: one task, many candidates. Builds, checks, times and scores each candidate.

Order of one evaluation: static guards -> build -> a fresh worker loads the candidate ->
n input sets (fresh seeds; reference in the parent; outputs poisoned, compared here; inputs
checked for mutation) -> timing (outputs of the timed reps checked too; wall clock bound) ->
baselines (cached) -> milestone reward. See docs/harness.md.
"""

from __future__ import annotations

import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from cuda_agent.eval import checks
from cuda_agent.eval.baselines import BaselineCache, default_cache_dir, timing_from
from cuda_agent.eval.device_lock import device_lock, nvml_index
from cuda_agent.eval.dynamic_guards import judge_aten, judge_kernels, judge_side_work
from cuda_agent.eval.guards.static import check_candidate_static
from cuda_agent.eval.reference import Reference, snapshot_task, tensors_bytes
from cuda_agent.eval.reward import milestone_reward, speedup
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.verdict import Finding, SetResult, Timing, Verdict
from cuda_agent.eval.worker_client import Worker, WorkerError
from cuda_agent.task import Task


class CandidateError(ValueError):
    """The candidate folder is not in the expected layout."""


class Evaluator:
    def __init__(self, task: Task, cfg: EvalConfig | None = None, *, warm: bool = True):
        self.cfg = cfg or EvalConfig()
        self.device = self.cfg.device
        self.cache_dir = Path(self.cfg.cache_dir or default_cache_dir())
        self.task = snapshot_task(task)  # the reference never reads the workspace again
        self.warm = warm
        self._spare: Worker | None = Worker(self.device, isolate=self.cfg.sandbox) if warm else None
        self.ref = Reference(self.task, self.device, self.cfg.init_seed)
        self.unscorable = self.ref.determinism_problem(secrets.randbits(31))
        self.baseline_cache = BaselineCache(self.cache_dir / "baselines.json")
        # generous per-rep harness overhead (L2 flush, synchronizes, events) for the wall-clock
        # bound; measured ~0.15 ms on an H200, so the bound only catches gross under-reporting
        self._overhead_ms = 0.5

    # -- public --------------------------------------------------------------------------
    def evaluate(self, candidate_dir: Path, *, timing: bool = True) -> Verdict:
        """The full verdict; `timing=False` stops after correctness (a quicker check, reward
        then counts the candidate as not faster)."""
        t_start = time.perf_counter()
        candidate_dir = Path(candidate_dir).resolve()
        seconds: dict[str, float] = {}
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

        worker = self._take_worker()
        verdict = Verdict(status="correct", findings=findings, notes=list(self.ref.notes))
        try:
            self._run(worker, candidate_dir, build, verdict, seconds, timing)
        except WorkerError as e:
            verdict.status = "timeout" if e.kind == "timeout" else "runtime_error"
            verdict.error = str(e)
        finally:
            t = time.perf_counter()
            worker.kill()
            seconds["worker_kill"] = time.perf_counter() - t
        self._score(verdict, seconds)
        return self._finish(verdict, seconds, t_start)

    def time_baselines(self) -> tuple[Verdict, int]:
        """Eager and torch.compile alone (`cuda-agent baselines`), on fresh input sets, through the
        same cache an evaluation uses: (a verdict holding `eager`/`compiled`, modes found cached)."""
        kept = [{"inputs": self.task.draw_inputs(secrets.randbits(31), self.device)}
                for _ in range(self.cfg.timing_sets)]
        verdict = Verdict(status="correct")
        return verdict, self._baselines(kept, verdict)

    def close(self) -> None:
        if self._spare is not None:
            self._spare.close()
            self._spare = None
        shutil.rmtree(self.task.path.parent, ignore_errors=True)  # the private snapshot of the task

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- steps ---------------------------------------------------------------------------
    def _take_worker(self) -> Worker:
        """The waiting worker; the next one starts now, so it is ready by the next evaluation."""
        w, self._spare = self._spare, None
        if self.warm:
            self._spare = Worker(self.device, isolate=self.cfg.sandbox)
        return w or Worker(self.device, isolate=self.cfg.sandbox)

    def _run(self, worker: Worker, candidate_dir: Path, build: Any, verdict: Verdict, seconds: dict,
             timing: bool) -> None:
        t = time.perf_counter()
        worker.wait_ready()
        seconds["worker_start_wait"] = time.perf_counter() - t
        t = time.perf_counter()
        resp = worker.request(
            {
                "op": "load_candidate",
                "candidate_dir": str(candidate_dir),
                "build_dir": str(build.out_dir) if build else "",
                "own_kernels": checks.own_kernels(build),
                "init_inputs": self.ref.init_inputs,
                "state_dict": self.ref.state_dict,
                "init_seed": self.cfg.init_seed,
                "sandbox": self.cfg.sandbox,
            },
            self.cfg.timeout_s,
        )
        seconds["load"] = time.perf_counter() - t
        if not resp.get("ok"):
            verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
            return
        verdict.notes += resp.get("notes", [])
        verdict.findings += [Finding(**f) for f in resp.get("findings", [])]

        t = time.perf_counter()
        kept, out_tols = self._correctness(worker, build, verdict)
        seconds["correctness"] = time.perf_counter() - t
        if verdict.status != "correct" or verdict.failing_findings or not timing:
            return
        t = time.perf_counter()
        self._time_candidate(worker, kept, out_tols, verdict)
        seconds["timing"] = time.perf_counter() - t
        if verdict.status == "correct" and not verdict.failing_findings:
            t = time.perf_counter()
            self._baselines(kept, verdict)
            seconds["baselines"] = time.perf_counter() - t

    def _correctness(self, worker: Worker, build: Any, verdict: Verdict) -> tuple[list[dict], dict]:
        """Run every input set; return the sets kept for timing (inputs, references) and the
        per-output tolerances (tightened by the zero trap)."""
        import torch

        kept: list[dict] = []
        budget = checks.memory_budget(self.device, self.cfg.memory_fraction)
        tol = self.cfg.tolerances
        out_tols: dict[int, Any] = {}
        for i in range(self.cfg.n_sets):
            seed = secrets.randbits(31)
            ref32, ref64 = self.ref.outputs(self.task.draw_inputs(seed, self.device))
            if i == 0:
                for j, (r, r64) in enumerate(zip(ref32, ref64 or ref32)):
                    out_tols[j], note = checks.zero_trap(r, r64, tol)
                    if note:
                        verdict.notes.append(f"output {j}: {note}")
            inputs = self.task.draw_inputs(seed, self.device)
            bufs = [checks.poisoned_like(r) for r in ref32]
            resp = worker.request(
                {"op": "run", "inputs": inputs, "outputs": bufs, "record": i == 0 and self.cfg.record_guards,
                 "poison_bytes": 2 * tensors_bytes(ref32)},
                self.cfg.timeout_s,
            )
            if not resp.get("ok"):
                verdict.sets.append(SetResult(seed=seed, ok=False, error=checks.error_text(resp)))
                verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
                return kept, out_tols
            if self.device.startswith("cuda"):
                torch.cuda.synchronize(self.device)
            verdict.findings += [Finding(**f) for f in resp.get("findings", [])]
            if i == 0 and self.cfg.record_guards:
                verdict.findings += judge_aten(resp.get("aten", []))
                if self.device.startswith("cuda"):
                    verdict.findings += judge_kernels(
                        resp.get("kernels", []), checks.own_kernels(build), checks.libraries(build),
                        allowed_torch=True,
                    )
            verdict.findings += judge_side_work(0.0, None, resp.get("threads_delta", 0))
            result = checks.judge_set(seed, resp, bufs, ref32, ref64, out_tols, tol, self.ref.fp32,
                                      self.cfg.allow_precision, verdict)
            mutated = checks.mutated_inputs(inputs, self.task.draw_inputs(seed, self.device))
            if mutated:
                verdict.findings.append(Finding(guard="input_mutation", message=(
                    f"forward changed its input(s) {mutated}: inputs are read-only; write results to new outputs")))
                result.ok = False
            verdict.sets.append(result)
            if not result.ok:
                verdict.status = "incorrect"
            per_set = tensors_bytes(inputs) + tensors_bytes(ref32) + 2 * tensors_bytes(ref64 or [])
            if len(kept) < self.cfg.timing_sets and (not kept or per_set * (len(kept) + 1) <= budget):
                kept.append({"inputs": inputs, "ref32": ref32, "ref64": ref64})
            del bufs
        return kept, out_tols

    def _time_candidate(self, worker: Worker, kept: list[dict], out_tols: dict, verdict: Verdict) -> None:
        bufs = [[checks.poisoned_like(r) for r in k["ref32"]] for k in kept]
        with device_lock(self.cache_dir / "locks", self.device):
            t0 = time.perf_counter()
            resp = worker.request(
                {"op": "time", "input_sets": [k["inputs"] for k in kept], "outputs": bufs,
                 "config": self.cfg.timing.model_dump(), "nvml_index": nvml_index(self.device)},
                self.cfg.timeout_s + self.cfg.timing.budget_ms / 1e3 * 4,
            )
            wall_ms = (time.perf_counter() - t0) * 1e3
        if not resp.get("ok"):
            verdict.status, verdict.error = "runtime_error", checks.error_text(resp)
            return
        verdict.findings += [Finding(**f) for f in resp.get("findings", [])]
        timing = Timing(**resp["timing"])
        verdict.timing = timing
        verdict.findings += judge_side_work(timing.median_ms, timing.host_median_ms, resp.get("threads_delta", 0))
        if self.device.startswith("cuda"):  # CPU timing (tests) is host-clock only: nothing to bound
            verdict.findings += checks.wall_clock_bound(timing, wall_ms, self.cfg.timing, self._overhead_ms)
            import torch

            torch.cuda.synchronize(self.device)
        verdict.findings += checks.timed_outputs(bufs, kept, out_tols, self.cfg.tolerances)

    def _baselines(self, kept: list[dict], verdict: Verdict) -> int:
        """Fill verdict.eager / verdict.compiled, timing what the cache lacks; returns how many
        modes were found in the cache."""
        import torch

        device_name = torch.cuda.get_device_name(self.device) if self.device.startswith("cuda") else "cpu"
        worker: Worker | None = None
        cached = 0
        try:
            for mode in self.cfg.baselines:
                key = BaselineCache.key(self.task.source_hash, device_name, torch.__version__, self.ref.dtypes,
                                        mode if mode == "eager" else f"compile:{self.cfg.compile_mode}")
                entry = self.baseline_cache.get(key)
                cached += entry is not None
                if entry is None:
                    worker = worker or Worker(self.device, isolate=False)  # our own reference code only
                    entry = self._time_reference(worker, kept, mode)
                    if entry is None:
                        verdict.notes.append(f"{mode} baseline failed: see the worker log; reward uses what was timed")
                        continue
                    self.baseline_cache.put(key, entry)
                if mode == "eager":
                    verdict.eager = timing_from(entry)
                else:
                    verdict.compiled = timing_from(entry)
        except WorkerError as e:
            verdict.notes.append(f"baseline worker failed: {e}")
        finally:
            if worker is not None:
                worker.kill()
        return cached

    def _time_reference(self, worker: Worker, kept: list[dict], mode: str) -> dict | None:
        resp = worker.request(
            {"op": "load_reference", "task_ref": f"{self.task.path}::{self.task.class_name}",
             "inputs_path": str(self.task.inputs_path) if self.task.inputs_path else None,
             "init_inputs": self.ref.init_inputs, "state_dict": self.ref.state_dict,
             "init_seed": self.cfg.init_seed, "compile_mode": None if mode == "eager" else self.cfg.compile_mode},
            self.cfg.baseline_timeout_s,
        )
        if not resp.get("ok"):
            return None
        with device_lock(self.cache_dir / "locks", self.device):
            resp = worker.request(
                {"op": "time", "input_sets": [k["inputs"] for k in kept], "outputs": None,
                 "config": self.cfg.timing.model_dump(), "nvml_index": nvml_index(self.device)},
                self.cfg.baseline_timeout_s,
            )
        if not resp.get("ok"):
            return None
        return {"timing": resp["timing"], "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}

    def _score(self, verdict: Verdict, seconds: dict) -> None:
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

    @staticmethod
    def _finish(verdict: Verdict, seconds: dict, t_start: float) -> Verdict:
        seconds["total"] = time.perf_counter() - t_start
        verdict.seconds = {k: round(v, 4) for k, v in seconds.items()}
        return verdict
