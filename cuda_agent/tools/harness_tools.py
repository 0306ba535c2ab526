"""compile, verify and benchmark: the model's way into the harness. verify and benchmark evaluate
the workspace as it is now through the task's Evaluator (fresh worker, fresh seeds) and commit the
result as a version; a changed protected file is a guard violation and nothing runs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from cuda_agent.tools.base import NoArgs, Tool, ToolContext, ToolError, ToolResult


class CompileArgs(BaseModel):
    show: Literal["none", "ptx", "sass"] = Field("none", description="also show a kernel's PTX or SASS")
    kernel: str | None = Field(None, description="its name, or part of it")


class Compile(Tool):
    name = "compile"
    description = (
        "Build kernels/*.cu with nvcc: errors as file:line, or per kernel its registers, shared memory and spills."
    )
    Args = CompileArgs

    def execute(self, args: CompileArgs, ctx: ToolContext) -> ToolResult:
        from cuda_agent.kernels.build import build_kernels
        from cuda_agent.kernels.listings import ptx_of, sass_of
        from cuda_agent.kernels.toolkit import detect_arch

        kdir = ctx.workspace.root / "kernels"
        if not any(kdir.glob("*.cu")):
            raise ToolError("kernels/ has no .cu file yet: create one with edit_file (mode create)")
        r = build_kernels(kdir, ctx.eval.cache_root() / "build", arch=ctx.eval.arch, ptxas_verbose=True, lineinfo=True)
        if not r.ok:
            return ToolResult(
                status="error",
                observation=f"compile failed:\n{r.errors}\n\nfix the first error, then compile again",
                data={"ok": False, "errors": r.errors},
            )
        lines = [
            f"compiled in {r.seconds:.2f} s ({'nothing changed' if r.cached else 'rebuilt: ' + ', '.join(r.compiled)})"
        ]
        lines.append(f"launchers: {', '.join(r.launchers) or 'none'}")
        for name, p in sorted(r.ptxas.items()):
            spill = (
                f", SPILLS {p.spill_stores}B store/{p.spill_loads}B load" if (p.spill_stores or p.spill_loads) else ""
            )
            lines.append(
                f"  {name}: {p.registers} registers, {p.shared_bytes} B shared, {p.stack_bytes} B stack{spill}"
            )
        if r.warnings:
            lines.append(f"warnings:\n{r.warnings}")
        if args.show == "ptx":
            lines.append(f"PTX:\n{ptx_of(r, kdir, args.kernel, ctx.eval.arch or detect_arch())}")
        elif args.show == "sass":
            lines.append(f"SASS:\n{sass_of(r, kdir, args.kernel)}")
        return ToolResult(
            observation="\n".join(lines),
            data={"ok": True, "cached": r.cached, "ptxas": {k: v.model_dump() for k, v in r.ptxas.items()}},
        )


class Evaluate(Tool):
    """verify and benchmark: one evaluation of the workspace, without or with timing."""

    Args = NoArgs
    timing: bool

    def execute(self, args: NoArgs, ctx: ToolContext) -> ToolResult:
        from cuda_agent.eval.render import verdict_text
        from cuda_agent.eval.verdict import Finding, Verdict

        if changed := ctx.workspace.changed_protected():
            verdict = Verdict(
                status="guard_violation",
                findings=[
                    Finding(
                        guard="protected_file",
                        message=f"{', '.join(changed)} changed: protected files are read-only; "
                        "they were restored, edit model_new.py and kernels/ only",
                    )
                ],
            )
            ctx.workspace.restore_protected()
        else:
            if (again := same_failed_build(ctx)) is not None:
                return again
            verdict = self._evaluate(ctx)
        info = ctx.workspace.commit_version(verdict)
        if verdict.status == "compile_error":
            ctx.failed_builds[info.sha] = verdict
        tail = f"\nversion {info.version} committed ({info.sha[:8]})"
        if (best := ctx.workspace.best()) is not None:
            timed = f"{best.time_ms:.4f} ms" if best.time_ms else "not timed yet: benchmark it"
            tail += f"; best so far: version {best.version} (reward {best.reward}, {timed})"
        for line in ctx.workspace.staging_findings:  # what the commit kept out (a FIFO, a huge file) or replaced
            tail += f"\n{line}"
        return ToolResult(
            observation=verdict_text(verdict) + tail,
            status="ok" if verdict.correct else "error",
            verdict=verdict,
            version=info,
        )

    def _evaluate(self, ctx: ToolContext):
        """The verdict, shown while it is made: the first evaluation in this process also starts the
        evaluator and times the baselines unless cached (a minute on a CPU), so it is said in lines
        too; later ones only on a live display (a terminal, the TUI's status)."""
        if ctx.progress is None:
            return ctx.evaluator.evaluate(ctx.workspace.root, timing=self.timing)
        first = not ctx.evaluator_started
        label = f"first evaluation ({self.name})" if first else self.name
        with ctx.progress.job(label, lines=first) as job:
            if first:
                job.phase("starting the evaluator (the task's reference, the jailed recorder and judge)")
            evaluator = ctx.evaluator
            with job.watch(evaluator, timing=self.timing):
                verdict = evaluator.evaluate(ctx.workspace.root, timing=self.timing)
            job.advance(
                f"{label}: {verdict.status} in {job.seconds():.0f} s" if first and not ctx.progress.live else None
            )  # on a terminal the run's status line says it
        return verdict


class Verify(Evaluate):
    name = "verify"
    description = (
        "Build, run the guards and check correctness on fresh random inputs against a float64 "
        "reference; no timing. Commits a version."
    )
    timing = False


class Benchmark(Evaluate):
    name = "benchmark"
    description = "verify, then time it against eager and torch.compile and give the reward. Commits a version."
    timing = True


def same_failed_build(ctx: ToolContext) -> ToolResult | None:
    """The answer when model_new.py and kernels/ are unchanged since the latest version and that
    version failed to compile: the same files build the same way, so they are neither built nor
    committed again (None: evaluate as usual)."""
    from cuda_agent.eval.render import verdict_text

    last = (ctx.workspace.versions() or [None])[-1]
    if last is None or last.status != "compile_error" or not ctx.workspace.same_files(last.sha):
        return None
    earlier = ctx.failed_builds.get(last.sha)
    head = (
        f"not evaluated: model_new.py and kernels/ are unchanged since version {last.version} "
        f"({last.sha[:8]}), which failed to compile; nothing was committed. Fix the first error, compile, "
        "then verify"
    )
    body = f"its verdict:\n{verdict_text(earlier)}" if earlier is not None else "run compile to see the errors"
    return ToolResult(
        status="error",
        observation=f"{head}\n{body}",
        data={"evaluated": False, "same_as": {"version": last.version, "commit": last.sha, "status": last.status}},
    )
