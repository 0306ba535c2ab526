"""`cuda-agent optimize TASK --model M`: run the agent on one task, headless.

Writes a run folder: `workspace/` (git history of every evaluated version, `best` branch) and
`trajectory.jsonl` (every turn, tool result and evaluation, flushed as it happens).

`cuda-agent optimize --resume RUN_DIR --model M` continues a stopped or killed run in the same
workspace and trajectory (agent/resume.py). The model and the limits come from the flags given
now, and the limits count the whole run (resume a run stopped at 50 steps with --max-steps 80);
the task, the evaluation settings and the tools come from the run itself (--device may move it).
With --script, the script is the whole session: the turns already taken are skipped.
"""

from __future__ import annotations

import os

import json
from pathlib import Path
from typing import Optional

import typer

# exit codes (README.md): 0 improved (> 5% faster than torch.compile), 1 correct but not faster,
# 2 bad usage, 3 no correct version, 4 the run failed (model or harness error)
EXIT_IMPROVED, EXIT_CORRECT, EXIT_NONE, EXIT_ERROR = 0, 1, 3, 4


def optimize_command(
    task: Optional[str] = typer.Argument(None, help="The task: path/to/file.py or path/to/file.py::ClassName (not with --resume)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", envvar="CUDA_AGENT_MODEL",
                                        help="litellm model name, e.g. openai/gpt-5, anthropic/claude-sonnet-4-5, hosted_vllm/qwen."),
    api_base: Optional[str] = typer.Option(None, "--api-base", envvar="CUDA_AGENT_API_BASE", help="OpenAI-compatible server URL (vLLM, SGLang, llama.cpp, Ollama)."),
    script: Optional[Path] = typer.Option(None, "--script", help="Replay a scripted model (JSON list of responses) instead of calling an LLM; on --resume the turns already taken are skipped."),
    resume: Optional[Path] = typer.Option(None, "--resume", metavar="RUN_DIR", help="Continue a stopped or killed run (same workspace and trajectory); model and limits from these flags, limits counting the whole run."),
    out: Path = typer.Option(Path("runs"), "--out", help="Folder for run folders (must not be inside a git repository)."),
    inputs: Optional[Path] = typer.Option(None, "--inputs", help="File defining get_inputs()/get_init_inputs() when the task lacks them."),
    device: Optional[str] = typer.Option(None, "--device", help="cuda:N (default cuda:0; cpu only for host-only test kernels)."),
    max_steps: int = typer.Option(50, "--max-steps", min=1, help="Model turns at most."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help="Dollars at most (priced turns)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Prompt + completion tokens at most."),
    max_wall: Optional[float] = typer.Option(None, "--max-wall", help="Seconds of wall time at most."),
    target_speedup: Optional[float] = typer.Option(None, "--target-speedup", help="Stop once the best version is this much faster than torch.compile."),
    allow_shell: bool = typer.Option(False, "--allow-shell", help="Give the model a shell tool (off by default)."),
    no_sandbox: bool = typer.Option(False, "--no-sandbox", help="Run candidates and the shell without the jail (when bubblewrap cannot run here); every verdict records it."),
    no_compile: bool = typer.Option(False, "--no-compile-baseline", help="Skip the torch.compile baseline."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but the result line."),
    confirm: bool = typer.Option(False, "--confirm", help="Ask before each tool call: approve, reject with a reason, or edit its arguments."),
    tui: bool = typer.Option(False, "--tui", help="Run it in the terminal app: watch, pause, approve, message, stop (the agent runs in its own process; closing the app can detach)."),
    control: bool = typer.Option(False, "--control", hidden=True, help="Take commands from the run folder's control channel (what --tui starts)."),
    announce: Optional[Path] = typer.Option(None, "--announce", hidden=True, help="Write the run folder's path to this file once it exists."),
) -> None:
    """Exit codes: 0 improved (more than 5% faster than torch.compile), 1 correct but not faster,
    2 bad usage, 3 no correct version, 4 the run failed."""
    if no_sandbox:  # read by EvalConfig and the shell, here and in any process this run starts
        os.environ["CUDA_AGENT_NO_SANDBOX"] = "1"
    from rich.console import Console
    from rich.markup import escape

    from cuda_agent.task import TaskError, load_task
    from cuda_agent.workspace import WorkspaceError

    console = Console(stderr=json_out, quiet=quiet and not json_out)
    if (task is None) == (resume is None):
        console.print("[red]error[/]: give a TASK to start a run, or --resume RUN_DIR to continue one, not both",
                      highlight=False)
        raise typer.Exit(2)
    if resume is not None and (inputs is not None or allow_shell or no_compile):
        console.print("[red]error[/]: --inputs, --allow-shell and --no-compile-baseline come from the run being "
                      "resumed; leave them out", highlight=False)
        raise typer.Exit(2)
    if (model is None) == (script is None):
        console.print("[red]error[/]: give --model (an LLM through litellm) or --script (a scripted model), not both",
                      highlight=False)
        raise typer.Exit(2)
    if tui:
        from cuda_agent.tui.launch import launch_with_tui

        limit_flags = _limit_flags(max_steps, max_cost, max_tokens, max_wall, target_speedup)
        child = ["optimize", *([task] if task else []), *(["--resume", str(resume)] if resume else []),
                 *(["--model", model] if model else []), *(["--api-base", api_base] if api_base else []),
                 *(["--script", str(script)] if script else []), "--out", str(out),
                 *(["--inputs", str(inputs)] if inputs else []), *(["--device", device] if device else []),
                 *limit_flags, *(["--allow-shell"] if allow_shell else []),
                 *(["--no-compile-baseline"] if no_compile else [])]
        raise typer.Exit(launch_with_tui(child, out if resume is None else resume.parent, approve=confirm,
                                         model=model, api_base=api_base, script=script, limit_flags=limit_flags))
    from cuda_agent.agent.loop import AgentConfig, run_agent
    from cuda_agent.agent.resume import ResumeError, resume_run
    from cuda_agent.agent.console import ConsoleApproval, LiveWriter
    from cuda_agent.trajectory import TrajectoryWriter

    state = None
    try:
        if resume is None:
            env = _new_environment(load_task(task, inputs=inputs), device, out, allow_shell, no_compile)
        else:  # a corrupt trajectory (ValueError) is a usage error too: the folder can't be continued
            env, _, state = resume_run(resume, eval_overrides={"device": device} if device else None)
    except (TaskError, WorkspaceError, ResumeError, ValueError) as e:
        console.print(f"[red]error[/]: {escape(str(e))}", highlight=False)
        raise typer.Exit(2)
    llm = _model(model, api_base, script, skip=state.steps if state else 0)
    run_dir = env.workspace.root.parent
    console.print(f"run folder: {run_dir}", highlight=False)
    limits = AgentConfig(max_steps=max_steps, max_cost=max_cost, max_tokens=max_tokens, max_wall_s=max_wall,
                         target_speedup=target_speedup)
    live = not (quiet or json_out or confirm) and console.is_terminal
    writer = (LiveWriter(run_dir / "trajectory.jsonl", console, llm.name) if live
              else TrajectoryWriter(run_dir / "trajectory.jsonl"))
    approval = ConsoleApproval(Console()) if confirm else None
    remote = None
    if control:  # the TUI (or another client) steers through files in the run folder
        from cuda_agent.agent.remote import RemoteControl

        remote = RemoteControl(run_dir, approve_mode=confirm)
    if announce is not None:
        announce.write_text(str(run_dir))
    final, final_error, result = None, None, None
    try:
        with env:
            result = run_agent(llm, env, limits, writer, run_id=run_dir.name, resume_state=state,
                               approval=remote.approval if remote else approval,
                               inbox=remote.inbox if remote else None,
                               checkpoint=remote.checkpoint if remote else None)
            writer.close()
            console.print("re-verifying the best version, writing report.md and the drop-in...")
            final, final_error = finalize(env, run_dir, result)
    finally:
        writer.close()
        if remote is not None:
            remote.close(result.stop_reason if result else "error")
    code, summary = run_summary(run_dir, result, final, final_error)
    if json_out:
        print(json.dumps(summary, indent=1))
    else:
        v = summary["verified"]
        line = (f"best: version {summary['best']['version']}, re-verified, reward {summary['verified_reward']}, "
                f"{v['time_ms'] or 0:.4f} ms, {v['speedup_vs_compile'] or 0:.2f}x vs torch.compile"
                if v else "no correct version passed re-verification")
        Console().print(f"{result.stop_reason} after {result.steps} steps; {line}; {run_dir}", highlight=False)
        if final and final.dropin:
            Console().print(f"drop-in: {final.dropin} (see its README.md); report: {final.report}", highlight=False)
        if result.error or final_error:
            Console(stderr=True).print(f"[red]error[/]: {escape(result.error or final_error)}", highlight=False)
    raise typer.Exit(code)


def finalize(env, run_dir: Path, result):
    """Re-verify the run's best version, write report.md and the drop-in: (FinalOutputs or None, the
    error text when that failed). `batch` ends each task's run with this too."""
    from cuda_agent.results import finalize_run

    try:  # the result is what passes again with more input sets, not the run's own check
        return finalize_run(env, run_dir, result, run_dir / "trajectory.jsonl"), None
    except Exception as e:  # the run's records stay; say why there is no report
        return None, f"finalizing the run failed: {type(e).__name__}: {e}"


def run_summary(run_dir: Path, result, final, final_error: str | None) -> tuple[int, dict]:
    """The exit code and the summary `--json` prints, from the loop's RunResult and finalize()'s outputs
    (`batch` records each task's row from the same summary)."""
    verified = final.reverification.verified if final else None
    best = verified.version if verified else None
    code = EXIT_ERROR if result.stop_reason.startswith(("model_error", "error")) or final_error else (
        EXIT_NONE if best is None else EXIT_IMPROVED if verified.verdict.reward == 3 else EXIT_CORRECT)
    v = verified.verdict if verified else None
    summary = {"run_dir": str(run_dir), "stop_reason": result.stop_reason, "steps": result.steps,
               "tokens": result.tokens, "cost": result.cost, "wall_s": round(result.wall_s, 1),
               "error": result.error or final_error, "best": best.model_dump(mode="json") if best else None,
               "verified_reward": v.reward if v else None,
               "verified": {"speedup_vs_eager": v.speedup_vs_eager, "speedup_vs_compile": v.speedup_vs_compile,
                            "time_ms": v.timing.median_ms if v.timing else None,
                            "eager_ms": v.eager.median_ms if v.eager else None,
                            "compile_ms": v.compiled.median_ms if v.compiled else None} if v else None,
               "report": str(final.report) if final else None,
               "dropin": str(final.dropin) if final and final.dropin else None}
    return code, summary


def _limit_flags(max_steps, max_cost, max_tokens, max_wall, target_speedup) -> list[str]:
    flags = ["--max-steps", str(max_steps)]
    for name, value in (("--max-cost", max_cost), ("--max-tokens", max_tokens), ("--max-wall", max_wall),
                        ("--target-speedup", target_speedup)):
        if value is not None:
            flags += [name, str(value)]
    return flags


def _new_environment(task, device: str | None, out: Path, allow_shell: bool, no_compile: bool):
    from cuda_agent.environment import Environment
    from cuda_agent.eval.settings import EvalConfig, default_device

    dev = device or default_device()
    cfg = EvalConfig(device=dev, baselines=["eager"] if no_compile else ["eager", "compile"])
    return Environment.create(task, runs_dir=out, eval_config=cfg, settings={"allow_shell": allow_shell})


def _model(model: str | None, api_base: str | None, script: Path | None, skip: int = 0):
    if script is not None:
        from cuda_agent.agent.scripted_model import ScriptedModel

        scripted = ScriptedModel.from_json(script)
        del scripted.responses[:skip]  # one response per turn: a resumed replay goes on where it stopped
        return scripted
    from cuda_agent.agent.litellm_model import LitellmModel

    return LitellmModel(model, api_base=api_base)
