"""`cuda-agent baselines TASK_DIR`: time eager and torch.compile for every task once per GPU type,
into the harness's baseline cache (eval/baselines.py), so a batch's evaluations find them there.
The cache is keyed by (task hash, GPU name, torch version, dtypes, mode, timing method): one GPU
per type is enough. Evaluator.time_baselines times each task, the code path an evaluation takes."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from cuda_agent.batch.tasks import TaskEntry


class BaselineResult(BaseModel):
    task_id: str
    device: str
    device_name: str
    eager_ms: float | None = None
    compile_ms: float | None = None
    cached: bool = False  # every mode was in the cache already
    error: str | None = None


def one_device_per_type(devices: list[str]) -> dict[str, str]:
    """GPU name -> the first listed device of that type (cpu -> cpu)."""
    out: dict[str, str] = {}
    for d in devices:
        out.setdefault(_device_name(d), d)
    return out


def time_baselines(entry: TaskEntry, device: str, cfg, say: Callable[[str], None] = lambda now: None) -> BaselineResult:
    """`say(what)` is told what it does now (cuda_agent/progress.py's Job.phase)."""
    from cuda_agent.eval.baselines import CACHE_NOTES
    from cuda_agent.eval.evaluator import Evaluator
    from cuda_agent.progress import baseline_names
    from cuda_agent.task import load_task

    cfg = cfg.model_copy(update={"device": device})
    out = BaselineResult(task_id=entry.id, device=device, device_name=_device_name(device))
    try:
        say("loading the task and its reference outputs")
        task = load_task(str(entry.path), module_name="cuda_agent_task_baseline")
        with Evaluator(task, cfg, ahead="none") as ev:
            if ev.unscorable:
                out.error = ev.unscorable
                return out
            say(f"timing {baseline_names(cfg)} in batches of fresh inputs (what the cache holds is read instead)")
            verdict, cached = ev.time_baselines()
            out.cached = cached == len(cfg.baselines)
            out.eager_ms = verdict.eager.median_ms if verdict.eager else None
            out.compile_ms = verdict.compiled.median_ms if verdict.compiled else None
            # what the cache had (nothing, an entry failing its check: timed now) is not an error
            out.error = "; ".join(n for n in verdict.notes if n not in CACHE_NOTES) or None
    except Exception as e:  # one task's failure is reported; the others go on
        out.error = f"{type(e).__name__}: {e}".splitlines()[0]
    return out


def _device_name(device: str) -> str:
    if not device.startswith("cuda"):
        return "cpu"
    import torch

    return torch.cuda.get_device_name(device)


def cache_path(cfg) -> Path:
    return cfg.cache_root() / "baselines.json"
