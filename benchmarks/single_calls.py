"""A call alone against a call in a batch, per kept verdict (eval-*.json, as `gpu_suite.sh tests` keeps
them): the parent's median per call in the measured batches, the fastest batch of one call, and their
ratio. The judge flags a batch whose figure is below OVERLAP_RATIO of a call alone, less one call's
noise (docs/harness.md, "A call alone"); honest kernels read close to 1 (a batch hides only each
call's start behind the call before).

    python3 benchmarks/single_calls.py OUT_DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cuda_agent.eval.clocked import OVERLAP_RATIO


def rows(folder: Path) -> list[tuple[str, int, float, float, float]]:
    out = []
    for path in sorted(folder.glob("eval-*.json")):
        d = json.loads(path.read_text())
        d = d.get("verdict", d)  # `cuda-agent eval --json` nests the verdict beside the task
        t = d.get("timing") or {}
        batch, alone = t.get("parent_median_ms"), t.get("single_call_ms")
        if batch and alone:
            out.append((path.stem.removeprefix("eval-"), t.get("batch_reps", 0), batch, alone, batch / alone))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    found = rows(ap.parse_args().folder)
    print(f"{'verdict':34} {'R':>5} {'in a batch ms':>14} {'alone ms':>10} {'batch/alone':>12}")
    for name, reps, batch, alone, ratio in found:
        print(f"{name:34} {reps:5d} {batch:14.4f} {alone:10.4f} {ratio:12.3f}")
    if found:
        print(f"lowest batch/alone: {min(r[4] for r in found):.3f} (flagged below about {OVERLAP_RATIO})")
    else:
        print("no verdict with both figures")


if __name__ == "__main__":
    main()
