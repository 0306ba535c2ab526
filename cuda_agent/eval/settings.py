"""How one evaluation is run: counts, limits, tolerances, baselines. Defaults are the documented
ones (docs/harness.md); every field can be set from the CLI or a config file."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.eval.timing import TimingConfig
from cuda_agent.eval.tolerance import Tolerances
from cuda_agent.jail import sandbox_enabled


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt setting is an error, not ignored

    device: str = "cuda:0"  # "cpu" runs the same pipeline on CPU tensors (host-only kernels; tests)
    n_sets: int = Field(5, ge=1)  # correctness input sets, seeds drawn anew each evaluation
    # of the memory budget: what a candidate's forward may allocate, and what one timed batch may hold
    memory_fraction: float = 0.5
    # GPU memory (GiB) one evaluation may use, all its processes together; None: what the GPU has free
    # when the evaluator starts. A task that cannot fit is `unscorable` before any candidate runs
    memory_budget_gib: float | None = Field(None, gt=0)
    timeout_s: float = 120.0  # per request to a jailed process (load, one input set, timing)
    baseline_timeout_s: float = 900.0  # torch.compile can take minutes on big graphs
    baselines: list[str] = ["eager", "compile"]
    # 0: baselines from the cache (timed once per task, GPU and torch version). N: timed again in
    # every timed evaluation, in N rounds of candidate, eager, compile (the final re-verification)
    baseline_rounds: int = Field(0, ge=0)
    compile_mode: str = "default"
    timing: TimingConfig = TimingConfig()
    tolerances: Tolerances = Tolerances()
    allow_precision: bool = False  # fp16/bf16/TF32 in an fp32 task becomes a warning, not a failure
    # more imports the built library may have (exact names or globs, e.g. "cusparse*"): docs/guards.md
    native_symbols: list[str] = []
    # list the GPU kernels the first replay launched (CUPTI) and flag any that are not the candidate's
    # own (`foreign_kernel`). Off by default: the native audit already leaves a library no symbol to
    # reach another library's kernels, and CUPTI costs the judge ~4 s of start-up on an H200
    trace_kernels: bool = False
    # recorders and judges started ahead of need (Evaluator(ahead="keep")); None: two on a GPU (each takes
    # 4-7 s to start on an H200, longer than an agent's pause), one on the CPU (tests, 2 cores)
    spares: int | None = Field(None, ge=0)
    # the jail for the recorder and the judge (cuda_agent/jail.py); off only by --no-sandbox or
    # CUDA_AGENT_NO_SANDBOX=1, and every verdict then says so
    sandbox: bool = Field(default_factory=sandbox_enabled)
    # what the recorder's or judge's scratch folder (host disk: outputs, its log) may hold, and the
    # largest file either may write; past it the jail is stopped and the verdict says so
    scratch_gib: float = Field(32.0, gt=0)
    arch: str | None = None  # nvcc arch, default from the device
    cache_dir: Path | None = None  # build and baseline caches; default ~/.cache/cuda-agent
    init_seed: int = 0
    # `cuda-agent eval` only: seconds its warm server (eval/server.py) waits for the next evaluation
    # before it exits; 0: each `eval` evaluates in its own process (start-up and all)
    server_idle_s: float = Field(600.0, ge=0)

    def cache_root(self) -> Path:
        """Where builds and baselines are cached: cache_dir, else CUDA_AGENT_CACHE, else ~/.cache/cuda-agent."""
        from cuda_agent.eval.baselines import default_cache_dir

        return Path(self.cache_dir or default_cache_dir())
