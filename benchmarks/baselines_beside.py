"""On the GPU machine: what the issue-15 changes to timing and profiling show on a real H200.

1. One candidate evaluated with the run's cached baselines, then as the final re-verification
   does (eager and torch.compile timed again beside it in N interleaved rounds): every round's
   median, the figures the reward uses, and the seconds each evaluation took.
2. profile's summary of a candidate that calls cuBLAS (tests/gpu/cublas_candidate on
   examples/gemm_bias_relu): launches grouped by kernel, whose each is, and the `next:` hint.

    python3 benchmarks/baselines_beside.py [--example examples/gemm_bias_relu] [--rounds 3] [--json-out F]
    python3 benchmarks/baselines_beside.py --example tests/harness/cpu_task --candidate tests/harness/cpu_task/honest \
        --device cpu --no-compile --no-profile      # a smoke run without a GPU
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]


def figures(v) -> dict:
    ms = lambda t: round(t.median_ms, 5) if t else None  # noqa: E731
    return {
        "status": v.status,
        "reward": v.reward,
        "baselines": v.baselines,
        "candidate_ms": ms(v.timing),
        "eager_ms": ms(v.eager),
        "compile_ms": ms(v.compiled),
        "speedup_eager": v.speedup_vs_eager,
        "speedup_compile": v.speedup_vs_compile,
        "seconds": v.seconds.get("total"),
        "notes": [n for n in v.notes if n.startswith("baselines")],
    }


def evaluations(example: Path, candidate: Path, rounds: int, device: str, compile_: bool) -> dict:
    from cuda_agent.eval.evaluator import Evaluator
    from cuda_agent.eval.settings import EvalConfig
    from cuda_agent.task import load_task

    cfg = EvalConfig(device=device, baselines=["eager", "compile"] if compile_ else ["eager"])
    out = {}
    with Evaluator(load_task(str(example / "model.py")), cfg, ahead="first") as ev:
        out["first"] = figures(ev.evaluate(candidate))  # times the baselines into the cache if they are not
        out["cached"] = figures(ev.evaluate(candidate))
        ev.cfg = cfg.model_copy(update={"baseline_rounds": rounds})
        t = time.perf_counter()
        out["interleaved"] = figures(ev.evaluate(candidate))
        out["interleaved"]["wall_s"] = round(time.perf_counter() - t, 2)
    return out


def profile(task: Path, candidate: Path) -> dict:
    from cuda_agent.tools.base import TaskCopy, ToolContext
    from cuda_agent.tools.profile_tool import Profile

    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        shutil.copytree(candidate, ws)
        ctx = ToolContext(workspace=SimpleNamespace(root=ws), task_copy=TaskCopy(ref=str(task), hash="unchecked"))
        r = Profile().run({}, ctx)
    return {"status": r.status, "observation": r.observation, "groups": r.data.get("groups")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", type=Path, default=ROOT / "examples" / "gemm_bias_relu")
    ap.add_argument("--candidate", type=Path, default=None, help="default: the example's candidate/")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument("--device", default="cuda:0", help="cpu: a smoke run on host-only kernels (tests/harness/cpu_task)")
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    ap.add_argument("--no-profile", action="store_true")
    args = ap.parse_args()
    result = {
        "evaluations": evaluations(
            args.example, args.candidate or args.example / "candidate", args.rounds, args.device, not args.no_compile
        )
    }
    print(json.dumps(result["evaluations"], indent=1))
    if not args.no_profile:
        result["profile_cublas"] = profile(
            ROOT / "examples" / "gemm_bias_relu" / "model.py", ROOT / "tests" / "gpu" / "cublas_candidate"
        )
        print(result["profile_cublas"]["observation"])
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
