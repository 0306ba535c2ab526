"""From a one-line edit of a kernel to the full verdict, in a warm session.

The agent's inner loop: the Evaluator is already up (reference built, a spare worker waiting,
baselines cached by the first evaluation), the model edits one line of a kernel, and we time
build + fresh worker + 5 correctness sets + timing + cached baselines + reward.
Target on an H200: <= 2 s median (CUDA Agent's own scripts: ~47 s for their axpby example). A second
table splits the timing phase: warm-up, measured batches, the batches of one call, and within the
last two the host's work of drawing fresh inputs and checking the sampled outputs.

    python benchmarks/edit_to_verdict.py [--task examples/scale_add_small] [--reps 5] [--timing max_batches=15]
        [--candidate DIR] [--device cpu] [--profile 25]

`--profile N` evaluates one more edit under cProfile and prints the N functions of the parent that
took the most time of their own: where the host's share of a verdict goes (waits on the jailed
processes show as reads and polls). On a machine without a GPU: `--device cpu --candidate
examples/scale_add_small/candidate_cpu`.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.task import load_task

TIMING_PARTS = ["timing_warmup", "timing_measured", "timing_single", "timing_inputs", "timing_checks"]


def timing_option(ap: argparse.ArgumentParser) -> None:
    """`--timing KEY=VALUE ...`: timing settings over the defaults (timing_check.py takes it too)."""
    ap.add_argument("--timing", nargs="*", default=[], metavar="KEY=VALUE", help="timing settings (eval.timing)")


def timing_config(pairs: list[str]) -> TimingConfig:
    """`--timing KEY=VALUE` pairs over the defaults (a misspelt key is TimingConfig's error)."""
    return TimingConfig(**dict(p.split("=", 1) for p in pairs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="examples/scale_add_small")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cuda:0", help="cuda:N, or cpu: host-only kernels (the pipeline, no GPU)")
    ap.add_argument("--candidate", type=Path, help="the candidate to edit (default: TASK/candidate)")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="one more verdict under cProfile: top N")
    timing_option(ap)
    args = ap.parse_args()
    timing = timing_config(args.timing)
    device = args.device
    if device != "cpu":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(
                "no CUDA GPU is visible to torch: run `cuda-agent doctor` to see why, or pass --device cpu"
            )
    task_dir = Path(args.task)
    work = Path(tempfile.mkdtemp(prefix="edit-to-verdict-")) / "candidate"
    shutil.copytree(args.candidate or task_dir / "candidate", work)
    kernel = sorted((work / "kernels").glob("*.cu"))[0]
    original = kernel.read_text()
    cfg = EvalConfig(
        device=device,
        cache_dir=Path(tempfile.mkdtemp(prefix="etv-cache-")),
        baselines=["eager", "compile"],
        timing=timing,
    )
    t0 = time.perf_counter()
    with Evaluator(load_task(str(task_dir / "model.py")), cfg) as ev:
        t_setup = time.perf_counter() - t0
        t0 = time.perf_counter()
        first = ev.evaluate(work)  # primes the build of unchanged files and the baselines
        t_first = time.perf_counter() - t0
        assert first.correct, (first.status, first.error, first.findings)
        times, verdicts = [], []

        def edit(i: int) -> None:
            time.sleep(3.0)  # let the spare worker finish starting, as it would while a model thinks
            # a one-line edit that changes the compiled code: a different (still correct) block size
            kernel.write_text(
                original.replace("const int threads = 256;", f"const int threads = {128 << (i % 3)};")
                + f"\n// edit {i}\n"
            )

        for i in range(args.reps):
            edit(i)
            t0 = time.perf_counter()
            v = ev.evaluate(work)
            times.append(time.perf_counter() - t0)
            verdicts.append(v)
        profile = cProfile.Profile() if args.profile else None
        if profile is not None:
            edit(args.reps)
            profile.runcall(ev.evaluate, work)
    print(f"device: {device} ({verdicts[-1].timing.device if verdicts[-1].timing else '?'})")
    print(f"evaluator set-up: {t_setup:.2f} s; first verdict (baselines timed, torch.compile): {t_first:.2f} s")
    parts = ["static", "build", "audit", "start_wait", "load", "correctness", "timing", "baselines", "kill"]
    print("| rep | status | reward | seconds | " + " | ".join(parts) + " | other |")
    print("|---|---|---|---|" + "---|" * (len(parts) + 1))
    for i, (t, v) in enumerate(zip(times, verdicts)):
        s = v.seconds
        other = t - sum(s.get(p, 0.0) for p in parts)  # scoring, the verdict, anything unaccounted
        print(
            f"| {i} | {v.status} | {v.reward} | {t:.2f} | "
            + " | ".join(f"{s.get(p, 0.0):.2f}" for p in parts)
            + f" | {other:.2f} |"
        )
    print(f"timing phase, seconds (settings: {timing.model_dump()})")
    print("| rep | timing | " + " | ".join(p.removeprefix("timing_") for p in TIMING_PARTS) + " | R | batches |")
    print("|---|---|" + "---|" * (len(TIMING_PARTS) + 2))
    for i, v in enumerate(verdicts):
        s, t = v.seconds, v.timing
        print(
            f"| {i} | {s.get('timing', 0.0):.2f} | "
            + " | ".join(f"{s.get(p, 0.0):.2f}" for p in TIMING_PARTS)
            + f" | {t.batch_reps if t else 0} | {t.batches if t else 0} |"
        )
    print(f"edit -> verdict median: {statistics.median(times):.2f} s (target <= 2 s)")
    starts = {k: v for k, v in verdicts[-1].seconds.items() if k.startswith("judge_start")}
    print(
        "the judge's own start-up (last verdict; it overlaps the previous evaluation and the pause): "
        + ", ".join(f"{k.removeprefix('judge_start_')} {v:.2f} s" for k, v in starts.items())
    )
    if profile is not None:
        print(f"one more verdict under cProfile (the profiler inflates its times): top {args.profile} by own time")
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
