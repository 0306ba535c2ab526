"""The checks of `cuda-agent doctor`, one function each (CHECKS lists them): each takes the run's Facts
and returns what it found; doctor.run_checks names them and keeps one failure from hiding the rest."""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Callable, Literal, NamedTuple

from cuda_agent import doctor_facts
from cuda_agent.doctor_facts import Driver, Facts, run_tool

# The driver's module options: whether performance counters are for admin users only.
NVIDIA_PARAMS = Path("/proc/driver/nvidia/params")

NO_GPU_FIX = (
    "install the NVIDIA driver, or run on a machine with a GPU; CPU-only: `cuda-agent eval` cannot time kernels"
)


class Found(NamedTuple):
    """What a check function returns; the runner adds the name and severity."""

    ok: bool
    detail: str
    fix: str | None = None


def _v(t: tuple[int, int]) -> str:
    return f"{t[0]}.{t[1]}"


def check_gpu(f: Facts) -> Found:
    d = f.driver
    if isinstance(d, str):
        return Found(False, f"no NVIDIA GPU / driver found (NVML: {d})", NO_GPU_FIX)
    head = f"driver {d.version} (supports CUDA {_v(d.cuda)})"
    if not d.gpus:
        return Found(False, f"{head}, but no GPU visible", "check `nvidia-smi`; " + NO_GPU_FIX)
    gpus = "; ".join(f"GPU {i}: {g.name}, {g.memory_gib:.0f} GiB, {g.arch}" for i, g in enumerate(d.gpus))
    return Found(True, f"{head}; {gpus}")


def check_nvcc(f: Facts) -> Found:
    if f.nvcc is None:
        return Found(
            False,
            f"nvcc not found (looked in $CUDA_HOME/bin, $CUDA_PATH/bin, PATH, {doctor_facts.DEFAULT_CUDA_BIN})",
            "install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads) "
            "or set CUDA_HOME to the folder that holds bin/nvcc",
        )
    where = f"{f.nvcc.path} (from {f.nvcc.source})"
    if f.nvcc_version is None:
        return Found(False, f"{where}: no 'release X.Y' in `nvcc --version`", "reinstall the CUDA toolkit")
    detail, problems = f"nvcc {_v(f.nvcc_version)} at {where}", []
    d = f.driver
    if isinstance(d, Driver) and d.gpus:
        archs = run_tool(f.nvcc.path, "--list-gpu-arch")
        if missing := sorted({g.arch for g in d.gpus if f"compute_{g.cc[0]}{g.cc[1]}" not in archs}):
            problems.append(f"cannot build for {', '.join(missing)}: use a CUDA toolkit that supports it")
        # Code from a newer toolkit major does not load on an older driver.
        if f.nvcc_version[0] > d.cuda[0]:
            problems.append(
                f"the driver supports CUDA {_v(d.cuda)} only: update the driver, "
                f"or use a CUDA {d.cuda[0]}.x toolkit (set CUDA_HOME)"
            )
        if not problems:
            detail += f"; builds for {', '.join(sorted({g.arch for g in d.gpus}))}"
    return Found(not problems, detail, "; ".join(problems) or None)


def _optional_tool(name: str, purpose: str, fix: str) -> Found:
    if (tool := doctor_facts.find_tool(name)) is None:  # through the module: tests replace it
        return Found(False, f"{name} not found ({purpose} only)", fix)
    m = re.search(r"Version (\S+)", run_tool(tool.path, "--version"))
    return Found(True, f"{name} {m.group(1) if m else '(version unknown)'} at {tool.path} (from {tool.source})")


def check_ncu(f: Facts) -> Found:
    found = _optional_tool(
        "ncu", "profiling", "install Nsight Compute (part of the CUDA toolkit) so the agent can profile kernels"
    )
    if found.ok and _counters_admin_only():
        # profile runs in the jail without admin rights (root included), so ncu would be refused
        return Found(
            False,
            found.detail + "; the driver lets only admin users read performance counters",
            "an admin sets the driver option NVreg_RestrictProfilingToAdminUsers=0 (modprobe.d, then "
            "reload the driver): profile runs in the jail without admin rights",
        )
    return found


def _counters_admin_only() -> bool:
    try:
        return re.search(r"^RmProfilingAdminOnly:\s*1\b", NVIDIA_PARAMS.read_text(), re.M) is not None
    except OSError:
        return False


def check_sanitizer(f: Facts) -> Found:
    return _optional_tool(
        "compute-sanitizer",
        "memory checking",
        "install the CUDA toolkit's compute-sanitizer so the agent can check kernels for bad memory accesses",
    )


def check_torch(f: Facts) -> Found:
    import torch

    with warnings.catch_warnings():  # a CUDA build without a driver warns; the detail says it
        warnings.simplefilter("ignore")
        available = torch.cuda.is_available()
    detail = (
        f"torch {torch.__version__}, CUDA build {torch.version.cuda or 'none (CPU-only)'}, "
        f"CUDA available: {'yes' if available else 'no'}"
    )
    if torch.version.cuda is None:
        return Found(
            False,
            detail,
            "install a CUDA build of torch (https://pytorch.org/get-started/locally/): "
            "the harness runs candidates and baselines on the GPU",
        )
    if available:
        return Found(True, detail)
    d = f.driver
    if isinstance(d, str) or not d.gpus:
        return Found(False, detail, "torch needs a GPU and driver: see the GPU / driver check")
    if f.torch_cuda and f.torch_cuda[0] > d.cuda[0]:
        return Found(
            False,
            detail,
            f"torch is built for CUDA {torch.version.cuda}, the driver supports "
            f"{_v(d.cuda)}: update the driver or install a torch built for CUDA {d.cuda[0]}.x",
        )
    return Found(
        False,
        detail,
        "torch cannot reach the GPU: check CUDA_VISIBLE_DEVICES and `python -c 'import torch; torch.cuda.init()'`",
    )


def check_cuda_versions(f: Facts) -> Found:
    """torch and our kernels share one process: their CUDA majors should agree with each other and the driver."""
    t, n = f.torch_cuda, f.nvcc_version
    d = f.driver if isinstance(f.driver, Driver) else None
    known = [
        f"torch CUDA {_v(t) if t else 'none'}",
        f"nvcc {_v(n) if n else 'none'}",
        f"driver CUDA {_v(d.cuda) if d else 'none'}",
    ]
    problems = []
    if t and n and t[0] != n[0]:
        problems.append(
            f"torch's CUDA {t[0]} and nvcc's CUDA {n[0]} differ: kernels and torch load "
            f"two CUDA runtimes; use a toolkit and a torch of one CUDA major"
        )
    # A newer driver runs older CUDA builds; only an older driver is a problem.
    if t and d and t[0] > d.cuda[0]:
        problems.append(f"the driver (CUDA {_v(d.cuda)}) is older than torch's CUDA {_v(t)}: update the driver")
    return Found(not problems, ", ".join(known), "; ".join(problems) or None)


# litellm-style model names -> the env var holding the provider's key.
KEY_BY_PREFIX = {
    "openai/": "OPENAI_API_KEY",
    "anthropic/": "ANTHROPIC_API_KEY",
    "gemini/": "GEMINI_API_KEY",
    "openrouter/": "OPENROUTER_API_KEY",
    "deepseek/": "DEEPSEEK_API_KEY",
}
BARE_NAMES = {r"gpt-|o1|o3|o4": "OPENAI_API_KEY", r"claude-": "ANTHROPIC_API_KEY"}
LOCAL_PREFIXES = ("hosted_vllm/", "ollama/")


def key_env(model: str) -> str | None:
    """The env var that must hold `model`'s key, or None when doctor doesn't know the provider."""
    for prefix, env in KEY_BY_PREFIX.items():
        if model.startswith(prefix):
            return env
    for pattern, env in BARE_NAMES.items():
        if re.match(pattern, model):
            return env
    return None


def check_model(f: Facts) -> Found:
    if f.model is None:
        return Found(
            False,
            "no model configured (only `cuda-agent optimize` needs one)",
            "pass --model or set CUDA_AGENT_MODEL, e.g. anthropic/claude-sonnet-4-5",
        )
    if f.api_base or f.model.startswith(LOCAL_PREFIXES):
        why = "a custom API base is set" if f.api_base else "a local server"
        return Found(True, f"{f.model}: {why}, no API key needed")
    if (env := key_env(f.model)) is None:
        return Found(True, f"{f.model}: provider unknown to doctor, API key not checked")
    is_set = bool(os.environ.get(env))  # never the value: only whether it is there
    return Found(
        is_set, f"{f.model}: {env} {'set' if is_set else 'not set'}", None if is_set else f"export {env}=<your key>"
    )


def check_objdump(f: Facts) -> Found:
    """The judge reads each built object's host instructions with it (eval/guards/native_code.py)."""
    from cuda_agent.eval.guards.native_code import NoDisassembler, objdump

    try:
        path = objdump()
    except NoDisassembler as e:
        return Found(False, str(e), "apt-get install binutils: without it every evaluation's library audit fails")
    first = run_tool(path, "--version").splitlines()
    return Found(True, f"{first[0] if first else 'objdump'} at {path}: the library audit reads host instructions")


def check_jail(f: Facts) -> Found:
    """Whether a jailed evaluation process starts here: the same probe the evaluator uses."""
    from cuda_agent.jail import find_bwrap, jail_problem
    from cuda_agent.jail_limits import pids_route

    if problem := jail_problem():
        return Found(
            False,
            problem,
            "apt-get install bubblewrap (and allow user namespaces), or evaluate with "
            "--no-sandbox, knowing that candidate code then runs unjailed",
        )
    return Found(
        True,
        f"bubblewrap jail works ({find_bwrap()}): no network, own PID namespace, writes only to "
        f"scratch; processes limited by {pids_route()}",
    )


CHECKS: list[tuple[str, Literal["required", "optional"], Callable[[Facts], Found]]] = [
    ("GPU / driver", "required", check_gpu),
    ("nvcc", "required", check_nvcc),
    ("ncu", "optional", check_ncu),
    ("compute-sanitizer", "optional", check_sanitizer),
    ("torch", "required", check_torch),
    ("CUDA versions", "optional", check_cuda_versions),
    ("model", "optional", check_model),
    ("objdump", "required", check_objdump),
    ("jail", "required", check_jail),
]
