"""sanitize: compute-sanitizer on one forward of the workspace's candidate. Out-of-bounds writes,
shared-memory races and reads of uninitialised memory can pass random-input checks; this is
where they show, each with its kernel, source line, thread and address."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from cuda_agent.eval.single_run import DEFAULT_SEED
from cuda_agent.profiling.sanitizer import MISSING, SanitizerReport, find_sanitizer, sanitize_candidate
from cuda_agent.tools.base import ToolContext, ToolResult
from cuda_agent.tools.wrapped import WrappedTool

SHOWN_FINDINGS = 6
# what the sanitizer runs on: single_run's default input set (sanitizer_command passes no --seed)
INPUTS = f"one forward on one input set of the task's own shapes (get_inputs(), seed {DEFAULT_SEED})"

# what to do about the first finding, by what its kind starts with
_FIXES = (
    (
        "invalid",
        "misaligned",
        "a vector access on an address that is not aligned to its size: check alignment "
        "before float2/float4 accesses, or fall back to scalar ones",
    ),
    (
        "invalid",
        "",
        "an access outside its buffer: check the bounds guard at that line (i < n, the grid's "
        "rounding) and the sizes the launcher passes",
    ),
    (
        "shared-memory",
        "",
        "add __syncthreads() between the write and the read at those lines (__syncwarp() when "
        "both threads are in one warp)",
    ),
    (
        "uninitialized",
        "",
        "a read of global memory nothing wrote (torch.empty gives uninitialised memory, e.g. an "
        "accumulator or output read before its first write): write or zero it first",
    ),
    ("CUDA API error", "", "the program failed after a device fault: fix the first kernel finding"),
)


class SanitizeArgs(BaseModel):
    tool: Literal["memcheck", "racecheck", "initcheck"] = Field(
        "memcheck",
        description="memcheck: out-of-bounds or misaligned accesses; racecheck: shared-memory "
        "races; initcheck: uninitialised global reads",
    )


class Sanitize(WrappedTool):
    name = "sanitize"
    description = (
        f"compute-sanitizer on {INPUTS}: bad accesses, races, uninitialised reads, with kernel and line. 10-120 s."
    )
    Args = SanitizeArgs
    missing = MISSING

    def program(self, ctx: ToolContext) -> Path | None:
        return find_sanitizer(str(ctx.tools.sanitizer_path) if ctx.tools.sanitizer_path else None)

    def wrapped(
        self, args: SanitizeArgs, ctx: ToolContext, sanitizer: Path, task_ref: str, kernels: Path
    ) -> ToolResult:
        res = sanitize_candidate(
            sanitizer,
            args.tool,
            task_ref,
            Path(ctx.workspace.root),
            kernels,
            ctx.tools.sanitize_timeout_s,
            sandbox=ctx.eval.sandbox,
        )
        data = {"available": True, "tool": args.tool, "report": res.report.model_dump() if res.report else None}
        if not res.ok:
            partial = findings_text(res.report) if res.report and res.report.findings else ""
            text = f"sanitize: {res.error}" + (f"\n{partial}" if partial else "")
            return ToolResult(status="error", observation=text, data={**data, "error": res.error})
        report = res.report
        if report.clean:
            others = " and ".join(t for t in ("memcheck", "racecheck", "initcheck") if t != args.tool)
            text = (
                f"sanitize: no errors found by {args.tool} in {INPUTS} ({res.seconds:.0f} s)"
                + (" (but the program itself failed: run verify to see why)" if report.app_failed else "")
                + f"\nnext: a clean {args.tool} run covers this input only; {others} check other kinds of bug, "
                "benchmark checks speed"
            )
            return ToolResult(observation=text, data=data)
        return ToolResult(status="error", observation=findings_text(report) + "\nnext: " + fix_hint(report), data=data)


def findings_text(report: SanitizerReport) -> str:
    counts = (
        f"{_n(report.hazards, 'hazard')} displayed ({_n(report.errors, 'error')})"
        if report.hazards is not None
        else _n(report.errors, "error")
    )
    lines = [f"{report.tool}: {counts} in {INPUTS}; distinct findings:"]
    lines += [f"- {f.line()}" for f in report.findings[:SHOWN_FINDINGS]]
    if (hidden := len(report.findings) - SHOWN_FINDINGS) > 0:
        lines.append(f"- ... {hidden} more distinct findings")
    if report.not_printed:
        lines.append(f"({report.not_printed} more reports were not printed; they are usually the same bug)")
    return "\n".join(lines)


def fix_hint(report: SanitizerReport) -> str:
    first = next((f for f in report.findings if not f.kind.startswith("CUDA API error")), None) or (
        report.findings[0] if report.findings else None
    )
    tip = "fix the first finding"
    if first is not None:
        tip = next(
            (fix for kind, detail, fix in _FIXES if first.kind.startswith(kind) and detail in (first.address or "")),
            tip,
        )
        where = first.location or (first.kind.split(" at ", 1)[1].split(" ")[0] if " at " in first.kind else "")
        tip = (f"{where}: " if where else "") + tip
    return tip + f"; then run sanitize ({report.tool}) again and verify"


def _n(count: int | None, word: str) -> str:
    return f"? {word}s" if count is None else f"{count:,} {word}{'s' * (count != 1)}"
