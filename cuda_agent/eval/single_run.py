"""One forward of a candidate inside an NVTX range, for tools that wrap a whole process:
ncu (profile only `candidate_forward/`) and compute-sanitizer. Nothing is judged here.

    python -m cuda_agent.eval.single_run TASK.py[::Class] CANDIDATE_DIR [--seed N] [--warmup N]

The candidate's kernels must already be built (the build dir is passed in CUDA_AGENT_KERNELS,
or built here into the cache). The reference module is only constructed for its weights.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

NVTX_RANGE = "candidate_forward"
DEFAULT_SEED = 1  # the input set profile and sanitize run on (their observations say so)
RUNTIME_MODULE = "kernel_runtime"  # the name model_new.py imports
RUNTIME_PATH = Path(__file__).resolve().parent.parent / "kernels" / "runtime.py"


def load_candidate_model(task, candidate: Path, device: str, module_name: str = "model_new"):
    """Import a candidate's ModelNew in this process (its kernels already built, their folder in
    CUDA_AGENT_KERNELS), built like the reference and holding the reference's weights. For
    trusted runs only (profiling, benchmarks): nothing here guards against the candidate."""
    import torch

    from cuda_agent.task import seed_everything

    spec = importlib.util.spec_from_file_location(RUNTIME_MODULE, RUNTIME_PATH)
    runtime = importlib.util.module_from_spec(spec)
    sys.modules[RUNTIME_MODULE] = runtime
    spec.loader.exec_module(runtime)
    init = task.init_inputs(0)
    reference = task.build_model(init, device, 0)
    spec = importlib.util.spec_from_file_location(module_name, candidate / "model_new.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    seed_everything(0)
    with torch.device(device):
        model = module.ModelNew(*init)
    model = model.to(device)
    model.load_state_dict(reference.state_dict())
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cuda_agent.eval.single_run")
    ap.add_argument("task")
    ap.add_argument("candidate", type=Path)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--warmup", type=int, default=1, help="forwards before the profiled one (module load, caches)")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--build-only", action="store_true", help="build the kernels into the cache and stop")
    args = ap.parse_args(argv)

    import torch

    from cuda_agent.eval.reference import pin_full_fp32
    from cuda_agent.task import load_task

    pin_full_fp32()
    on_cuda = args.device.startswith("cuda")
    if not on_cuda:
        os.environ["CUDA_AGENT_HOST_ONLY"] = "1"  # host-only launchers (the CPU tests)
    if "CUDA_AGENT_KERNELS" not in os.environ and any((args.candidate / "kernels").glob("*.cu")):
        from cuda_agent.eval.baselines import default_cache_dir
        from cuda_agent.kernels.build import build_kernels

        built = build_kernels(args.candidate / "kernels", default_cache_dir() / "build", lineinfo=True)
        if not built.ok:
            print(built.errors, file=sys.stderr)
            return 3
        os.environ["CUDA_AGENT_KERNELS"] = str(built.out_dir)
    if args.build_only:
        return 0
    task = load_task(args.task)
    model = load_candidate_model(task, args.candidate, args.device)
    inputs = task.draw_inputs(args.seed, args.device)
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    with torch.no_grad():
        for _ in range(args.warmup):
            model(*inputs)
        sync()
        if on_cuda:
            torch.cuda.nvtx.range_push(NVTX_RANGE)
        out = model(*inputs)
        sync()
        if on_cuda:
            torch.cuda.nvtx.range_pop()
    shapes = [tuple(o.shape) for o in (out if isinstance(out, (tuple, list)) else [out])]
    print(f"single_run: one forward of {args.candidate} done, output shapes {shapes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
