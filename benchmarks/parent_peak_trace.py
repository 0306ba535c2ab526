"""What the evaluating (parent) process holds on the GPU at its peak, by allocation site.

One in-process evaluation with torch's CUDA memory history on; the trace is replayed to find the
moment this evaluation's allocations peaked, and the blocks alive then are grouped by the
innermost frame of the project (file:line) that allocated them. For finding what sits above the
float64 reference's own forward (memory_peak.py gives the totals, this gives the reasons).

    python3 benchmarks/parent_peak_trace.py TASK.py CANDIDATE_DIR [--budget-gib 80]
"""

from __future__ import annotations

import argparse
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

MARK_BYTES = 7_777_280  # a block size nothing else allocates: the start of the evaluation in the trace


def site(frames: list[dict]) -> str:
    for f in frames:
        name = f.get("filename", "")
        if "cuda_agent" in name and "/site-packages/" not in name:
            return f"{name.split('cuda_agent/')[-1]}:{f.get('line')} {f.get('name')}"
    return f"{frames[0].get('filename', '?')}:{frames[0].get('line')}" if frames else "?"


def peak_blocks(trace: list[dict]) -> tuple[int, int, dict[int, tuple[int, list]]]:
    """(baseline bytes at the mark, peak bytes after it, the blocks alive at the peak)."""
    live: dict[int, tuple[int, list]] = {}
    total = base = peak = 0
    marked = False
    at_peak: dict[int, tuple[int, list]] = {}
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], e.get("frames", []))
            total += e["size"]
            if not marked and e["size"] == MARK_BYTES:
                marked, base = True, total
            if marked and total > peak:
                peak, at_peak = total, dict(live)
        elif e["action"] == "free_completed" and e["addr"] in live:
            total -= live.pop(e["addr"])[0]
    return base, peak, at_peak


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task", type=Path)
    ap.add_argument("candidate", type=Path)
    ap.add_argument("--budget-gib", type=float, default=None)
    args = ap.parse_args()
    from cuda_agent.eval.evaluator import Evaluator
    from cuda_agent.eval.settings import EvalConfig
    from cuda_agent.task import load_task

    torch.cuda.memory._record_memory_history(max_entries=2_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = EvalConfig(cache_dir=Path(tmp), baselines=[], memory_budget_gib=args.budget_gib)
        with Evaluator(load_task(str(args.task)), cfg, ahead="none") as ev:
            eager = ev.ref.eager_bytes
            mark = torch.empty(MARK_BYTES, dtype=torch.uint8, device=ev.device)
            v = ev.evaluate(args.candidate)
            del mark
            snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = [e for t in snap["device_traces"] for e in t]
    base, peak, blocks = peak_blocks(trace)
    print(f"verdict {v.status} reward {v.reward}; memory_gib {v.memory_gib}; eager forward {eager / 2**30:.3f} GiB")
    print(
        f"held before the evaluation {base / 2**30:.3f} GiB; peak in it {peak / 2**30:.3f} GiB "
        f"({peak / max(eager, 1):.2f} eager forwards); {len(trace)} trace events"
    )
    by_site: dict[str, list[int]] = defaultdict(list)
    for size, frames in blocks.values():
        by_site[site(frames)].append(size)
    print("| GiB | blocks | allocated at |\n|---|---|---|")
    for s, sizes in sorted(by_site.items(), key=lambda kv: -sum(kv[1])):
        print(f"| {sum(sizes) / 2**30:.3f} | {len(sizes)} | {s} |")


if __name__ == "__main__":
    main()
