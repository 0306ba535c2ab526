"""Tasks per hour of `cuda-agent batch` over the examples, with 1 and 2 workers on one GPU (timing
serialised by the per-GPU lock) and on 2 GPUs where there are two; prints the ratios.

It builds a task folder from examples/ (each example's model.py, and its inputs sidecar), the
examples' hand-written candidates for `--eval-only`, and one scripted session per example (write
the candidate's files, benchmark, finish) for a scripted-model batch. Baselines are timed once
first (`cuda-agent baselines`), so every measured batch finds them cached and the figures compare
the batch, not torch.compile's compile time.

    python benchmarks/batch_scaling.py [--out /tmp/batch-scaling] [--copies N] [--only eval-only] [--prepare-only]

The 1-vs-2-GPU figure (2 GPUs; about 8 minutes with 20 tasks):

    python benchmarks/batch_scaling.py --copies 4 --no-compile --only 'eval-only, 1 worker;eval-only, 2 workers, 2 GPUs'

`--copies N` repeats each example N times as tasks of their own (20 tasks: --copies 4); the table's
"overhead s/task" is the batch's wall time per task (times the evaluations that run at once) less
the task's own evaluation (its verdict's total seconds, eval-only): process start, torch import,
the reference, the judge's start where it is not hidden behind another task's evaluation.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prepare(out: Path, copies: int = 1) -> tuple[Path, Path, Path]:
    """tasks/<name>.py (+ .inputs.py), candidates/<name>/, scripts/<name>.json from examples/."""
    tasks, cands, scripts = out / "tasks", out / "candidates", out / "scripts"
    for d in (tasks, cands, scripts):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    for ex in sorted((ROOT / "examples").iterdir()):
        if not (ex / "model.py").is_file() or not (ex / "candidate").is_dir():
            continue
        for k in range(copies):
            name = ex.name if k == 0 else f"{ex.name}_{k}"
            shutil.copy(ex / "model.py", tasks / f"{name}.py")
            if (ex / "model.inputs.py").is_file():
                shutil.copy(ex / "model.inputs.py", tasks / f"{name}.inputs.py")
            shutil.copytree(ex / "candidate", cands / name, ignore=shutil.ignore_patterns("__pycache__", "build"))
        files = sorted(p for p in (ex / "candidate").rglob("*") if p.is_file() and p.suffix in (".py", ".cu", ".cuh"))
        turns = [
            {
                "content": f"write {p.relative_to(ex / 'candidate')}",
                "tool_calls": [
                    {
                        "name": "edit_file",
                        "arguments": {
                            "mode": "create",
                            "path": str(p.relative_to(ex / "candidate")),
                            "overwrite": True,
                            "file_text": p.read_text(),
                        },
                    }
                ],
            }
            for p in files
        ]
        turns += [
            {"content": "measure", "tool_calls": [{"name": "benchmark", "arguments": {}}]},
            {"content": "done", "tool_calls": [{"name": "finish", "arguments": {"summary": "hand-written"}}]},
        ]
        for k in range(copies):
            name = ex.name if k == 0 else f"{ex.name}_{k}"
            (scripts / f"{name}.json").write_text(json.dumps({"name": "scripted-scaling", "responses": turns}))
    return tasks, cands, scripts


def batch(args: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cuda_agent.cli", *args], capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n")
        raise SystemExit(f"batch {' '.join(args)} failed with exit code {proc.returncode}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("/tmp/batch-scaling"))
    ap.add_argument("--prepare-only", action="store_true", help="write the task folder and scripts, run nothing")
    ap.add_argument("--copies", type=int, default=1, help="tasks per example")
    ap.add_argument(
        "--only",
        default="",
        help="run only the batches whose name starts with one of these, ';'-separated"
        " (e.g. 'eval-only, 1 worker;eval-only, 2 workers, 2 GPUs')",
    )
    ap.add_argument("--no-compile", action="store_true", help="no torch.compile baseline (its first timing is slow)")
    a = ap.parse_args()
    tasks, cands, scripts = prepare(a.out, a.copies)
    n = len(list(tasks.glob("*.py"))) - len(list(tasks.glob("*.inputs.py")))
    print(f"{n} tasks in {tasks}")
    if a.prepare_only:
        return
    import torch

    gpus = torch.cuda.device_count()
    nc = ["--no-compile-baseline"] if a.no_compile else []
    batch(["baselines", str(tasks), "--device", "cuda:0", *nc])  # timed once; every batch below finds them cached
    configs = [
        (
            "eval-only, 1 worker, 1 GPU",
            ["--eval-only", "--candidates", str(cands), "--device", "cuda:0", "--evals-per-gpu", "1", "-j", "1"],
        ),
        (
            "eval-only, 2 workers, 1 GPU",
            ["--eval-only", "--candidates", str(cands), "--device", "cuda:0", "--evals-per-gpu", "2", "-j", "2"],
        ),
        # one evaluation at a time, the next task's process (imports, reference, judge start) ready
        (
            "eval-only, 2 workers, 1 GPU, 1 slot",
            ["--eval-only", "--candidates", str(cands), "--device", "cuda:0", "--evals-per-gpu", "1", "-j", "2"],
        ),
        (
            "scripted, 1 worker, 1 GPU",
            ["--script", str(scripts), "--device", "cuda:0", "--evals-per-gpu", "1", "-j", "1"],
        ),
        (
            "scripted, 2 workers, 1 GPU",
            ["--script", str(scripts), "--device", "cuda:0", "--evals-per-gpu", "2", "-j", "2"],
        ),
    ]
    if gpus >= 2:  # the figure: tasks/hour on 2 GPUs over 1 (goal >= 1.8x), both kinds of batch
        configs += [
            (
                "eval-only, 2 workers, 2 GPUs",
                ["--eval-only", "--candidates", str(cands), "--gpus", "0,1", "--evals-per-gpu", "1", "-j", "2"],
            ),
            (
                "scripted, 2 workers, 2 GPUs",
                ["--script", str(scripts), "--gpus", "0,1", "--evals-per-gpu", "1", "-j", "2"],
            ),
        ]
    prefixes = [p.strip() for p in a.only.split(";")]
    configs = [c for c in configs if any(c[0].startswith(p) for p in prefixes)]
    rows = []
    for i, (name, extra) in enumerate(configs):
        out = a.out / f"run{i}"
        shutil.rmtree(out, ignore_errors=True)
        wall = batch(["batch", str(tasks), "--out", str(out), "--filter", r"^[^/]+$", *extra, *nc])
        summary = json.loads((out / "summary.json").read_text())
        own = [json.loads(line)["wall_s"] for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
        workers = int(extra[extra.index("-j") + 1])
        gpus_used = len(extra[extra.index("--gpus") + 1].split(",")) if "--gpus" in extra else 1
        parallel = min(workers, int(extra[extra.index("--evals-per-gpu") + 1]) * gpus_used)  # evaluations at once
        overhead = wall * parallel / n - sum(own) / len(own) if own and name.startswith("eval-only") else None
        rows.append((name, wall, 3600 * n / wall, overhead, summary))
    print(f"| batch ({n} tasks) | wall s | tasks/hour | vs first of its kind | overhead s/task |")
    print("|---|---|---|---|---|")
    first: dict[str, float] = {}
    for name, wall, rate, overhead, _ in rows:
        kind = name.split(",")[0]
        first.setdefault(kind, rate)
        shown = f"{overhead:.1f}" if overhead is not None else "-"
        print(f"| {name} | {wall:.1f} | {rate:.0f} | {rate / first[kind]:.2f}x | {shown} |")
    print(json.dumps({name: s for name, _, _, _, s in rows}, indent=1)[:4000])


if __name__ == "__main__":
    main()
