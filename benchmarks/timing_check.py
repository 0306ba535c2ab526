"""Is the harness's timing repeatable and does it agree with an independent measurement?

1. The same candidate evaluated twice by two fresh Evaluators: medians <= 2% apart (target).
2. triton.testing.do_bench (its own L2 flush, events, median) on the same ModelNew forward in
   this process: within 5% of the harness's median (target). It times calls one at a time after
   a flush, so for kernels of a few microseconds it holds a start the harness's batches hide.
3. The parent's clock against the judge's CUDA events in the same evaluation (`parent_median_ms`,
   `event_median_ms`): within 5% (target); and each run's calls per batch (R), which a task's
   warm-up picks from its own timing; and the overhead's possible error over R as a share of the
   figure (Timing.resolution_ms, which a candidate's speed-up counts on top of its figure).

    python benchmarks/timing_check.py [--examples elementwise_chain,layernorm,...] [--timing max_batches=15]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from edit_to_verdict import timing_config, timing_option  # this folder: run as a script, it is on sys.path

from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.single_run import load_candidate_model
from cuda_agent.kernels.build import build_kernels
from cuda_agent.task import load_task


def load_candidate_here(task, cand: Path, cache: Path, device: str):
    """Build and import a candidate in this process (trusted: it is one of our examples)."""
    import os

    os.environ["CUDA_AGENT_KERNELS"] = str(build_kernels(cand / "kernels", cache / "build").out_dir)
    return load_candidate_model(task, cand, device, module_name=f"model_new_{cand.parent.name}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", default="elementwise_chain,layernorm,gemm_bias_relu,depthwise_conv2d,scale_add_small")
    timing_option(ap)
    args = ap.parse_args()
    timing = timing_config(args.timing)
    import torch
    import triton.testing

    torch.backends.cuda.matmul.allow_tf32 = False
    device = "cuda:0"
    rows = []
    for name in args.examples.split(","):
        root = Path("examples") / name
        task = load_task(str(root / "model.py"))
        cache = Path(tempfile.mkdtemp(prefix="timing-check-"))
        medians, reps, agree, resolution = [], [], [], []
        for _ in range(2):
            cfg = EvalConfig(device=device, cache_dir=cache, baselines=[], timing=timing)
            with Evaluator(task, cfg, ahead="none") as ev:  # no spare judge started beside the timing
                v = ev.evaluate(root / "candidate")
            assert v.correct, (name, v.status, v.error, v.findings)
            assert v.timing is not None, (name, "not timed", v.notes)
            medians.append(v.timing.median_ms)
            reps.append(v.timing.batch_reps)
            resolution.append(v.timing.resolution_ms / v.timing.median_ms * 100)  # what counted_ms adds
            if v.timing.parent_median_ms and v.timing.event_median_ms:
                agree.append(abs(v.timing.parent_median_ms / v.timing.event_median_ms - 1) * 100)
        model = load_candidate_here(task, root / "candidate", cache, device)
        inputs = task.draw_inputs(1, device)
        with torch.no_grad():
            indep = triton.testing.do_bench(lambda: model(*inputs), warmup=25, rep=500, return_mode="median")
        a, b = medians
        worst = f"{max(agree):.2f}%" if agree else "no events"
        apart, vs_bench = abs(a - b) / min(a, b) * 100, abs(a - indep) / indep * 100
        rows.append((name, a, b, apart, indep, vs_bench, worst, reps, max(resolution)))
    print(
        "| example | harness run 1 (ms) | run 2 (ms) | run-to-run | do_bench median (ms) | harness vs do_bench "
        "| parent vs events (worse run) | R (runs) | overhead's possible error (worse run) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, a, b, d, ind, d2, worst, r, res in rows:
        print(
            f"| {name} | {a:.4f} | {b:.4f} | {d:.2f}% | {ind:.4f} | {d2:.2f}% | {worst} | {r[0]}, {r[1]} | {res:.3f}% |"
        )
    print("targets: run-to-run <= 2%, vs do_bench <= 5%, parent vs events <= 5%")


if __name__ == "__main__":
    main()
