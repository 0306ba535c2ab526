"""What profile and sanitize share: one forward of the workspace's candidate under an NVIDIA tool
(ncu, compute-sanitizer), run in the jail, with the reference task from the run's private copy
(never from the workspace) and the kernels built with -lineinfo."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel

from cuda_agent.tools.base import Tool, ToolContext, ToolError, ToolResult


class WrappedTool(Tool):
    """Subclasses find their program, say what to do when it is missing, and implement `wrapped`
    with the program, the task reference and the built kernels."""

    missing: ClassVar[str]  # one line: what to install, and what to use until then

    def program(self, ctx: ToolContext) -> Path | None:
        raise NotImplementedError

    def execute(self, args: BaseModel, ctx: ToolContext) -> ToolResult:
        if (program := self.program(ctx)) is None:
            return ToolResult(status="error", observation=f"{self.name}: {self.missing}", data={"available": False})
        if ctx.task_copy is None:
            raise ToolError(
                "no reference task is configured for this run (the Environment makes one): profile and "
                "sanitize cannot run here; use verify and benchmark"
            )
        return self.wrapped(args, ctx, program, ctx.task_copy.ref, built_kernels(ctx))

    def wrapped(self, args: BaseModel, ctx: ToolContext, program: Path, task: str, kernels: Path) -> ToolResult:
        raise NotImplementedError


def built_kernels(ctx: ToolContext) -> Path:
    """Build kernels/*.cu with -lineinfo; a failed build is the model's to fix."""
    from cuda_agent.profiling.runner import build_for_tools

    root = Path(ctx.workspace.root)
    if not any((root / "kernels").glob("*.cu")):
        raise ToolError("kernels/ has no .cu file yet: write a kernel and compile it first")
    built = build_for_tools(root, ctx.eval.cache_root(), ctx.eval.arch)
    if not built.ok:
        first = "\n".join(built.errors.strip().splitlines()[:8])
        raise ToolError(f"the kernels do not build; run compile and fix the first error:\n{first}")
    return built.out_dir
