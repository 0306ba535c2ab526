"""profile: Nsight Compute on one forward of the workspace's candidate, summarised for the model
(per kernel: time, throughput, occupancy and its limiter, resources, stalls, ncu's advice), then
where it sits on the roofline and what to try next (the outline shared with sanitize:
tools/wrapped.py)."""

from __future__ import annotations

from pathlib import Path

from cuda_agent.profiling.launches import OWN, KernelGroup, group_launches, not_launched, own_kernels, time_by_origin
from cuda_agent.profiling.ncu import MISSING, KernelProfile, find_ncu, profile_candidate
from cuda_agent.profiling.roofline import (
    OVERRIDES,
    Roofline,
    count_task,
    detect_gpu_name,
    gpu_peaks,
    roofline,
    roofline_text,
)
from cuda_agent.tools.base import NoArgs, ToolContext, ToolResult
from cuda_agent.tools.wrapped import WrappedTool

SHOWN_KERNELS = 6  # kernels not the candidate's own, the most total time first; the rest are summed in one line
SHOWN_RULES = 3
_COSTS: dict[str, object] = {}  # task ref -> TaskCost, counted once per process


class Profile(WrappedTool):
    name = "profile"
    description = (
        "Nsight Compute on one forward: per kernel its time, throughput, occupancy, stalls and "
        "advice, then the roofline floor. 10-60 s."
    )
    Args = NoArgs
    missing = MISSING

    def program(self, ctx: ToolContext) -> Path | None:
        return find_ncu(str(ctx.tools.ncu_path) if ctx.tools.ncu_path else None)

    def wrapped(self, args: NoArgs, ctx: ToolContext, ncu: Path, task_ref: str, kernels: Path) -> ToolResult:
        res = profile_candidate(
            ncu, task_ref, Path(ctx.workspace.root), kernels, ctx.tools.profile_timeout_s, sandbox=ctx.eval.sandbox
        )
        if not res.ok:
            return ToolResult(
                status="error", observation=f"profile: {res.error}", data={"available": True, "error": res.error}
            )
        own = own_kernels(kernels)
        total = sum(k.duration_us or 0.0 for k in res.kernels)
        roof_text, roof = _roofline(ctx, task_ref, total)
        text = "\n".join(
            [kernels_text(res.kernels, res.seconds, own), roof_text, "next: " + next_hint(res.kernels, roof, own)]
        )
        groups = [g.summary() for g in group_launches(res.kernels, own)]
        return ToolResult(
            observation=text,
            data={
                "available": True,
                "kernels": [k.model_dump() for k in res.kernels],
                "groups": groups,
                "own_kernels": own,
                "roofline": roof.model_dump() if roof else None,
            },
        )


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


def _ids(launches: list[KernelProfile]) -> str:
    ids = [str(k.id) for k in launches]
    return "[" + ", ".join(ids[:4]) + (f", +{len(ids) - 4} more" if len(ids) > 4 else "") + "]"


def _us(v: float | None) -> str:
    return f"{v:.1f} us" if v is not None else "? us"


def group_text(g: KernelGroup) -> str:
    """One kernel: its launches (count and total when several), the longest launch's numbers, and
    ncu's advice when the kernel is the candidate's own (a library's code is not the model's to change)."""
    k = g.longest
    where = f"grid {k.grid or '?'} block {k.block or '?'}"
    if len(g.launches) == 1:
        head = f"{_ids(g.launches)} {g.name} ({g.origin})  {_us(k.duration_us)}  {where}"
    else:
        head = (
            f"{_ids(g.launches)} {g.name} ({g.origin})  {len(g.launches)} launches, {g.total_us:.1f} us together, "
            f"{g.total_us / len(g.launches):.1f} us each; the longest ({_us(k.duration_us)}, {where}):"
        )
    dram = f", {k.dram_bytes / 1e6:.1f} MB" if k.dram_bytes is not None else ""
    occ = f"occupancy {_pct(k.achieved_occupancy)} of {_pct(k.theoretical_occupancy)} theoretical"
    occ += f", limited by {k.occupancy_limiter}" if k.occupancy_limiter else ""
    res = (
        f"{k.registers if k.registers is not None else '?'} registers/thread, "
        f"{k.shared_bytes if k.shared_bytes is not None else '?'} B shared/block"
    )
    if k.stalls:
        res += " | stalls (cycles/instr): " + ", ".join(f"{name} {v:.1f}" for name, v in k.stalls)
    lines = [
        head,
        f"    SM {_pct(k.sm_pct)} | memory {_pct(k.mem_pct)} (DRAM {_pct(k.dram_pct)}{dram}) | {occ}",
        "    " + res,
    ]
    if g.own:
        lines += [f"    advice: {rule}" for rule in k.rules[:SHOWN_RULES]]
    elif k.rules:
        lines.append(
            f"    ncu's advice left out: it is about {g.origin if g.library else 'this kernel'}'s code, not yours"
        )
    return "\n".join(lines)


def kernels_text(kernels: list[KernelProfile], seconds: float, own: list[str] | None = None) -> str:
    """Launches grouped by kernel, the most total time first: every kernel of the candidate's own,
    the SHOWN_KERNELS heaviest of the others, the rest summed in one line."""
    groups = group_launches(kernels, own)
    total = sum(k.duration_us or 0.0 for k in kernels)
    n = len(kernels)
    parts = [
        f"ncu: {n} kernel launch{'es' * (n != 1)} ({len(groups)} kernel{'s' * (len(groups) != 1)}) in one "
        f"forward, {total:.1f} us of kernels (profiled in {seconds:.0f} s)"
    ]
    split = time_by_origin(groups)
    if len(split) > 1 or OWN not in split:
        parts.append(
            "time: "
            + "; ".join(
                f"{who} {us:.1f} us ({100 * us / total if total else 0:.0f}%) in {c} launch{'es' * (c != 1)}"
                for who, (us, c) in split.items()
            )
        )
    shown_others = [g for g in groups if not g.own][:SHOWN_KERNELS]
    shown = [g for g in groups if g.own or g in shown_others]
    parts += [group_text(g) for g in shown]
    if rest := [g for g in groups if g not in shown]:
        launches = sum(len(g.launches) for g in rest)
        parts.append(
            f"... {len(rest)} more kernel{'s' * (len(rest) != 1)} not yours ({launches} launch"
            f"{'es' * (launches != 1)}), {sum(g.total_us for g in rest):.1f} us together"
        )
    if idle := not_launched(groups, own):
        parts.append(f"defined in kernels/ but not launched in this forward: {', '.join(idle)}")
    return "\n".join(parts)


def next_hint(kernels: list[KernelProfile], roof: Roofline | None, own: list[str] | None = None) -> str:
    """One suggestion aimed at a kernel the model can change (its own kernel with the most time),
    saying first when most of the time is in library kernels; always ends with how to check it."""
    check = "; then compile, verify and benchmark"
    groups = group_launches(kernels, own)
    total = sum(g.total_us for g in groups)
    if roof and roof.measured_us and roof.measured_us <= 1.15 * roof.floor_us:
        return "within 15% of the roofline floor: little is left in this kernel; benchmark and consider finishing"
    room = (
        f"the floor leaves at most {roof.measured_us / roof.floor_us:.2f}x to gain; "
        if roof and roof.measured_us and roof.floor_us
        else ""
    )
    lib = [g for g in groups if g.library]
    lib_us = sum(g.total_us for g in lib)
    mine = [g for g in groups if g.own]
    libs = "/".join(dict.fromkeys(g.origin for g in lib))
    calls = (
        f"{libs}'s code is not yours, so ncu's advice on it is not either: gain there comes from calling it "
        "less or on better shapes (batch or merge the calls, fuse the work around them into your kernels) or "
        "from replacing it with your own kernel"
    )
    if not mine:
        if lib:
            return f"{room}all {lib_us:.1f} us of kernel time is in {libs} kernels: {calls}{check}"
        return (
            f"{room}none of the launched kernels is from your kernels/ sources: forward must call your launchers{check}"
        )
    target = mine[0]
    share = lib_us / total if total else 0.0
    lead = (
        f"{100 * share:.0f}% of the kernel time is in {libs} kernels: {calls}; in your own kernels, "
        if share >= 0.5
        else ""
    )
    return f"{room}{lead}{target.name} ({target.total_us:.1f} us): {_tip(target.longest)}{check}"


def _tip(k: KernelProfile) -> str:
    """What the numbers of one kernel of the model's own point at."""
    sm, mem = k.sm_pct or 0.0, k.mem_pct or 0.0
    stall = k.stalls[0][0] if k.stalls else ""
    if mem >= 60 and mem >= sm:
        return "memory throughput is the limit: move fewer bytes (fuse passes, 16-byte vector loads, no re-reads)"
    if k.occupancy_limiter and (k.theoretical_occupancy or 100) < 50 and "registers" in k.occupancy_limiter:
        return "occupancy is capped by registers: try __launch_bounds__ or fewer live values per thread"
    if stall == "long scoreboard":
        return (
            "warps wait on global loads: more independent loads in flight per thread, coalesced, or staged in "
            "shared memory"
        )
    if sm >= 60:
        return (
            "the compute pipes are busy: fewer instructions per output (reuse values, tensor cores where the "
            "dtype allows)"
        )
    if stall in ("barrier", "mio throttle", "short scoreboard"):
        return f"'{stall}' stalls lead: fewer __syncthreads() and fewer, wider shared-memory accesses"
    return "neither compute nor memory is busy (latency-bound): more parallel work per SM (grid, warps, ILP)"
