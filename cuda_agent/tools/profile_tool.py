"""profile: Nsight Compute on one forward of the workspace's candidate, summarised for the model
(per kernel: time, throughput, occupancy and its limiter, resources, stalls, ncu's advice), then
where it sits on the roofline and what to try next (the outline shared with sanitize:
tools/wrapped.py)."""

from __future__ import annotations

from pathlib import Path

from cuda_agent.profiling.ncu import MISSING, KernelProfile, find_ncu, profile_candidate
from cuda_agent.profiling.roofline import OVERRIDES, Roofline, count_task, detect_gpu_name, gpu_peaks, roofline, roofline_text
from cuda_agent.profiling.runner import short_name
from cuda_agent.tools.base import NoArgs, ToolContext, ToolResult
from cuda_agent.tools.wrapped import WrappedTool

SHOWN_KERNELS = 6  # the longest launches; the rest are summed in one line
SHOWN_RULES = 3
_COSTS: dict[str, object] = {}  # task ref -> TaskCost, counted once per process


class Profile(WrappedTool):
    name = "profile"
    description = ("Profile one forward of the current kernels with Nsight Compute: per kernel its duration, compute "
                   "and memory throughput (% of peak), achieved/theoretical occupancy and its limiter, registers, "
                   "shared memory, DRAM bytes, top warp stalls and ncu's advice, then the roofline floor. 10-60 s.")
    Args = NoArgs
    missing = MISSING

    def program(self, ctx: ToolContext) -> Path | None:
        return find_ncu(str(ctx.tools.ncu_path) if ctx.tools.ncu_path else None)

    def wrapped(self, args: NoArgs, ctx: ToolContext, ncu: Path, task_ref: str, kernels: Path) -> ToolResult:
        res = profile_candidate(ncu, task_ref, Path(ctx.workspace.root), kernels, ctx.tools.profile_timeout_s,
                                sandbox=ctx.eval.sandbox)
        if not res.ok:
            return ToolResult(status="error", observation=f"profile: {res.error}",
                              data={"available": True, "error": res.error})
        total = sum(k.duration_us or 0.0 for k in res.kernels)
        roof_text, roof = _roofline(ctx, task_ref, total)
        text = "\n".join([kernels_text(res.kernels, res.seconds), roof_text, "next: " + next_hint(res.kernels, roof)])
        return ToolResult(observation=text, data={"available": True, "kernels": [k.model_dump() for k in res.kernels],
                                                  "roofline": roof.model_dump() if roof else None})


def _roofline(ctx: ToolContext, task_ref: str, measured_us: float) -> tuple[str, Roofline | None]:
    from cuda_agent.task import load_task

    try:
        if task_ref not in _COSTS:
            _COSTS[task_ref] = count_task(load_task(task_ref, module_name="cuda_agent_task_roofline"))
        cost = _COSTS[task_ref]
    except Exception as e:  # a task the counter cannot run: the kernel metrics still stand
        return f"roofline: the task's FLOPs and bytes could not be counted ({type(e).__name__}: {e})", None
    peaks = gpu_peaks(ctx.tools.gpu_name or detect_gpu_name(), ctx.tools.model_dump(include=set(OVERRIDES)))
    point = roofline(cost, peaks, measured_us or None) if peaks else None
    return roofline_text(cost, peaks, measured_us or None), point


def _pct(v: float | None) -> str:
    return f"{v:.1f}%" if v is not None else "?"


def kernel_text(k: KernelProfile) -> str:
    dur = f"{k.duration_us:.1f} us" if k.duration_us is not None else "? us"
    lines = [f"[{k.id}] {short_name(k.name)}  {dur}  grid {k.grid or '?'} block {k.block or '?'}"]
    dram = f", {k.dram_bytes / 1e6:.1f} MB" if k.dram_bytes is not None else ""
    occ = f"occupancy {_pct(k.achieved_occupancy)} of {_pct(k.theoretical_occupancy)} theoretical"
    occ += f", limited by {k.occupancy_limiter}" if k.occupancy_limiter else ""
    lines.append(f"    SM {_pct(k.sm_pct)} | memory {_pct(k.mem_pct)} (DRAM {_pct(k.dram_pct)}{dram}) | {occ}")
    res = f"{k.registers if k.registers is not None else '?'} registers/thread, " \
          f"{k.shared_bytes if k.shared_bytes is not None else '?'} B shared/block"
    if k.stalls:
        res += " | stalls (cycles/instr): " + ", ".join(f"{name} {v:.1f}" for name, v in k.stalls)
    lines.append("    " + res)
    lines += [f"    advice: {rule}" for rule in k.rules[:SHOWN_RULES]]
    return "\n".join(lines)


def kernels_text(kernels: list[KernelProfile], seconds: float) -> str:
    total = sum(k.duration_us or 0.0 for k in kernels)
    longest = sorted(kernels, key=lambda k: -(k.duration_us or 0.0))
    head = f"ncu: {len(kernels)} kernel launch{'es' * (len(kernels) != 1)} in one forward, {total:.1f} us of kernels"
    parts = [head + f" (profiled in {seconds:.0f} s)"] + [kernel_text(k) for k in longest[:SHOWN_KERNELS]]
    rest = longest[SHOWN_KERNELS:]
    if rest:
        parts.append(f"... {len(rest)} more launches, {sum(k.duration_us or 0.0 for k in rest):.1f} us together")
    return "\n".join(parts)


def next_hint(kernels: list[KernelProfile], roof: Roofline | None) -> str:
    """One suggestion from the longest kernel's numbers; always ends with how to check it."""
    check = "; then compile, verify and benchmark"
    k = max(kernels, key=lambda k: k.duration_us or 0.0)
    sm, mem = k.sm_pct or 0.0, k.mem_pct or 0.0
    stall = k.stalls[0][0] if k.stalls else ""
    if roof and roof.measured_us and roof.measured_us <= 1.15 * roof.floor_us:
        return "within 15% of the roofline floor: little is left in this kernel; benchmark and consider finishing"
    room = f"the floor leaves at most {roof.measured_us / roof.floor_us:.2f}x to gain; " \
        if roof and roof.measured_us and roof.floor_us else ""
    if mem >= 60 and mem >= sm:
        tip = "memory throughput is the limit: move fewer bytes (fuse passes, 16-byte vector loads, no re-reads)"
    elif k.occupancy_limiter and (k.theoretical_occupancy or 100) < 50 and "registers" in k.occupancy_limiter:
        tip = "occupancy is capped by registers: try __launch_bounds__ or fewer live values per thread"
    elif stall == "long scoreboard":
        tip = ("warps wait on global loads: more independent loads in flight per thread, coalesced, or staged in "
               "shared memory")
    elif sm >= 60:
        tip = ("the compute pipes are busy: fewer instructions per output (reuse values, tensor cores where the "
               "dtype allows)")
    elif stall in ("barrier", "mio throttle", "short scoreboard"):
        tip = f"'{stall}' stalls lead: fewer __syncthreads() and fewer, wider shared-memory accesses"
    else:
        tip = "neither compute nor memory is busy (latency-bound): more parallel work per SM (grid, warps, ILP)"
    return room + tip + check
