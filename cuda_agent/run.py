"""One task run, from the task to its report: the one path `optimize`, a batch's task process and
the TUI's agent process (`python -m cuda_agent.run REQUEST.json`) take. Open the run (a new
workspace, or the run folder to resume), make the model, run the agent loop, finalize (re-verify
the best version, report.md, the drop-in) and return a typed RunOutcome. The caller chooses only
what differs, in one RunHooks: who answers, how the trajectory is shown, who approves tool calls
and steers the run, where evaluations run (a batch's pool) and whether an interrupted run is
finalized. Where the run keeps what is run_folder.py's (the RunFolder of its workspace).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from pydantic import BaseModel, ConfigDict

from cuda_agent.eval.verdict import Verdict
from cuda_agent.run_folder import RunFolder
from cuda_agent.settings import Settings
from cuda_agent.workspace.trailers import VersionInfo, metrics_of

if TYPE_CHECKING:
    from cuda_agent.agent.interfaces import Model
    from cuda_agent.agent.loop import RunResult
    from cuda_agent.agent.protocol import Approval
    from cuda_agent.agent.remote import RemoteControl
    from cuda_agent.agent.resume import ResumeState
    from cuda_agent.environment import Environment
    from cuda_agent.pool.base import EvaluatorLike
    from cuda_agent.progress import Progress
    from cuda_agent.results.finalize import FinalOutputs
    from cuda_agent.trajectory import TrajectoryWriter

# exit codes (README.md): 0 improved (> 5% faster than torch.compile), 1 correct but not faster,
# 2 bad usage, 3 no correct version, 4 the run failed (model or harness error)
EXIT_IMPROVED, EXIT_CORRECT, EXIT_USAGE, EXIT_NONE, EXIT_ERROR, EXIT_UNSCORABLE = 0, 1, 2, 3, 4, 5


class RunSpec(BaseModel):
    """What one run is about. Exactly one of `task` (start) and `resume` (continue) is given."""

    model_config = ConfigDict(extra="forbid")

    task: str | None = None  # path/to/file.py[::Class]
    inputs: Path | None = None  # get_inputs()/get_init_inputs() when the task file lacks them
    resume: Path | None = None  # a run folder to continue (its task, eval settings and tools are its own)
    workspace: Path | None = None  # the new run's workspace (a batch's task folder); default: under settings.out
    script: Path | None = None  # a scripted model (agent/scripted_model.py's file) instead of settings.model


class RunRequest(BaseModel):
    """A run handed to its own process (the TUI's agent): the spec, the resolved settings, how it is steered."""

    spec: RunSpec
    settings: Settings
    control: bool = False  # take commands from the run folder's control channel
    approve: bool = False  # every tool call waits for approval (through the control channel)
    announce: Path | None = None  # write the run folder's path here once it exists
    settings_record: dict | None = None  # the settings' origins for the header (settings.Resolved.record())


class RunError(ValueError):
    """The run cannot start: a task that does not load, a run folder that cannot be continued."""


class RunOutcome(BaseModel):
    """How a run ended and what it left: the loop's counters and the re-verified result."""

    run_dir: Path
    stop_reason: str
    steps: int
    tokens: int
    cost: float | None
    wall_s: float
    loop_error: str | None = None  # the model's or the harness's error, when one ended the loop
    finalize_error: str | None = None  # why there is no report, when finalizing failed
    best: VersionInfo | None = None  # the version that passed re-verification
    verified: Verdict | None = None  # its verdict with the re-verification's input sets
    report: Path | None = None
    dropin: Path | None = None

    @property
    def error(self) -> str | None:
        return self.loop_error or self.finalize_error

    @property
    def run_folder(self) -> RunFolder:
        return RunFolder(self.run_dir)

    @property
    def exit_code(self) -> int:
        if self.stop_reason.startswith(("model_error", "error")) or self.finalize_error:
            return EXIT_ERROR
        if self.stop_reason == "unscorable":
            return EXIT_UNSCORABLE
        if self.verified is None:
            return EXIT_NONE
        return EXIT_IMPROVED if self.verified.reward == 3 else EXIT_CORRECT

    def summary(self) -> dict:
        """What `optimize --json` prints and a batch row is made from."""
        v, m = self.verified, metrics_of(self.verified) if self.verified else None
        return {
            "run_dir": str(self.run_dir),
            "stop_reason": self.stop_reason,
            "steps": self.steps,
            "tokens": self.tokens,
            "cost": self.cost,
            "wall_s": round(self.wall_s, 1),
            "error": self.error,
            "best": self.best.model_dump(mode="json") if self.best else None,
            "verified_reward": v.reward if v else None,
            "verified": {
                "speedup_vs_eager": v.speedup_vs_eager,
                "speedup_vs_compile": v.speedup_vs_compile,
                "time_ms": m.time_ms,
                "eager_ms": m.eager_ms,
                "compile_ms": m.compile_ms,
            }
            if v and m
            else None,
            "report": str(self.report) if self.report else None,
            "dropin": str(self.dropin) if self.dropin else None,
        }


def finished_run(run_dir: Path) -> RunOutcome | None:
    """When the run in `run_dir` is finished (its trajectory ends with a `finished` closing), its outcome
    as its last process saved it (RunFolder.outcome); None when it is not finished or that was not saved
    (a run made before outcome.json existed, or one killed while it was re-verified). A finished run is
    not continued."""
    from cuda_agent.records import Closing
    from cuda_agent.trajectory import read_trajectory

    run = RunFolder(run_dir)
    try:
        records = read_trajectory(run.trajectory)
        saved = RunOutcome.model_validate_json(run.outcome.read_text())
    except (OSError, ValueError):
        return None  # not finished or not saved; open_run says what is wrong with a broken folder
    last = records[-1] if records else None
    if not isinstance(last, Closing) or last.stop_reason != "finished":
        return None
    same = (saved.stop_reason, saved.steps, saved.wall_s) == (last.stop_reason, last.steps, last.wall_s)
    return saved if same else None


def finished_line(done: RunOutcome) -> str:
    """What `--resume` of a finished run says, in one line."""
    v = done.verified
    result = (
        f"version {done.best.version} re-verified, reward {v.reward}"
        if v and done.best
        else "no correct version passed re-verification"
    )
    report = f"; report: {done.report}" if done.report else ""
    return f"{done.run_dir}: the run is finished ({done.steps} steps; {result}); nothing to resume{report}"


def open_run(spec: RunSpec, settings: Settings) -> tuple[Environment, ResumeState | None]:
    """The environment of a new run, or of the run to continue and where it stopped."""
    from cuda_agent.agent.resume import ResumeError, resume_run
    from cuda_agent.environment import Environment
    from cuda_agent.task import TaskError, load_task
    from cuda_agent.workspace import Workspace, WorkspaceError

    if (spec.task is None) == (spec.resume is None):
        raise RunError("give a task to start a run, or a run folder to resume, not both")
    try:
        if spec.resume is not None:
            env, _, state = resume_run(spec.resume, eval_overrides={"device": settings.eval.device})
            return env, state
        assert spec.task is not None  # exactly one of the two, checked above
        task = load_task(spec.task, inputs=spec.inputs)
        ws = (
            Workspace.create(task, path=spec.workspace)
            if spec.workspace
            else Workspace.create(task, runs_dir=settings.out)
        )
        return Environment(ws, settings.eval, settings.tools), None
    except (TaskError, WorkspaceError, ResumeError, ValueError) as e:  # a corrupt trajectory is a ValueError
        raise RunError(str(e)) from None


def make_model(settings: Settings, script: Path | None, skip: int = 0, kind: str | None = None) -> Model:
    """The model the run talks to, of kind `kind` from agent/model_kinds.py's registry (None: a
    scripted one when there is a script, its first `skip` responses already used, else an LLM through
    litellm, imported only then: GPU machines need not have it)."""
    from cuda_agent.model_kinds import ModelKindError
    from cuda_agent.model_kinds import make_model as make_of_kind

    try:
        return make_of_kind(settings, script, skip, kind)
    except ModelKindError as e:
        raise RunError(str(e)) from None


def model_problem(settings: Settings, script: Path | None, *, key: bool = True) -> str | None:
    """Why make_model's model could not answer, in one line, or None: a script that does not parse
    (each entry checked), no key for the model (`key=False`: the key lives elsewhere, a Ray cluster's
    nodes), no litellm. The commands ask before any run folder is made: bad usage, not a failed run."""
    from cuda_agent.agent.errors import ModelError
    from cuda_agent.agent.scripted_model import ScriptError

    try:
        model = make_model(settings, script)
        if key and (check := getattr(model, "check_key", None)):  # a model that needs a key (litellm's)
            check()
    except (ScriptError, RunError, ModelError) as e:
        return str(e)
    return None


@dataclass(frozen=True)
class RunHooks:
    """What a caller changes about a run; each left out is what a plain headless run does."""

    # who answers: an MCP client's bridge, say; None: make_model's, from the settings and the spec's script
    model: Model | None = None
    # makes the trajectory's writer from its path and the model (a live display); None: a plain TrajectoryWriter
    writer: Callable[[Path, Model], TrajectoryWriter] | None = None
    approval: Approval | None = None  # asked before each tool call (--confirm's console)
    # the run folder's control channel (the app): its approval, messages, pause and stop; it is closed
    # with the stop reason when the loop ends
    remote: RemoteControl | None = None
    # the environment's evaluators made elsewhere: a batch's pool
    evaluators: Callable[[Environment], Callable[[], EvaluatorLike]] | None = None
    # held while the best version is re-verified (a batch's slot on the pool)
    finalize_slot: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext
    finalize_interrupted: bool = True  # False: a run the batch stopped is left for its next start
    # a resumed run whose trajectory ends with a closing other than `interrupted` (it was stopped while
    # re-verifying) is only finalized, not continued
    closed_only_finalize: bool = False
    progress: Progress | None = None  # shows the long steps: the first evaluation, the re-verification


def run_task(
    spec: RunSpec,
    settings: Settings,
    hooks: RunHooks = RunHooks(),
    *,
    opened: tuple[Environment, ResumeState | None] | None = None,
    settings_record: dict | None = None,
) -> RunOutcome:
    """Run the agent on one task and finalize it (the outcome is saved in the run folder, RunFolder.outcome).
    `hooks`: what the caller changes (RunHooks); `opened`: open_run()'s result, when the caller has it;
    `settings_record`: the settings' origins for the header (settings.Resolved.record())."""
    from cuda_agent.agent.loop import RunResult, run_agent
    from cuda_agent.records import Closing
    from cuda_agent.trajectory import TrajectoryWriter, read_trajectory

    env, state = opened or open_run(spec, settings)
    run = env.workspace.run_folder
    last = read_trajectory(run.trajectory)[-1] if spec.resume is not None else None
    # a finished run is never continued: at most finalized (killed while it was)
    ended = (
        last
        if isinstance(last, Closing)
        and (last.stop_reason == "finished" or (hooks.closed_only_finalize and last.stop_reason != "interrupted"))
        else None
    )
    if hooks.evaluators is not None:
        env.ctx.evaluator_factory = hooks.evaluators(env)
    env.ctx.progress = hooks.progress
    remote = hooks.remote
    result: RunResult | None = None
    final, final_error = None, None
    with env:
        if ended is not None:
            result = RunResult(
                ended.stop_reason,
                env.workspace.best(),
                ended.steps,
                ended.tokens,
                ended.cost,
                ended.unpriced_turns,
                ended.wall_s,
                ended.error,
            )
        else:
            model = hooks.model or make_model(settings, spec.script, skip=state.turns if state else 0)
            out = hooks.writer(run.trajectory, model) if hooks.writer else TrajectoryWriter(run.trajectory)
            try:
                result = run_agent(
                    model,
                    env,
                    settings.limits,
                    out,
                    run_id=run.name,
                    resume_state=state,
                    approval=remote.approval if remote else hooks.approval,
                    inbox=remote.inbox if remote else None,
                    checkpoint=remote.checkpoint if remote else None,
                    settings_record=settings_record or {"values": settings.model_dump(mode="json")},
                )
            finally:
                out.close()
                if remote is not None:
                    remote.close(result.stop_reason if result else "error")
        if result.stop_reason != "interrupted" or hooks.finalize_interrupted:
            with hooks.finalize_slot():
                final, final_error = finalize(env, run, result, hooks.progress)
    verified = final.reverification.verified if final else None
    done = RunOutcome(
        run_dir=run.path,
        stop_reason=result.stop_reason,
        steps=result.steps,
        tokens=result.tokens,
        cost=result.cost,
        wall_s=result.wall_s,
        loop_error=result.error,
        finalize_error=final_error,
        best=verified.version if verified else None,
        verified=verified.verdict if verified else None,
        report=final.report if final else None,
        dropin=final.dropin if final else None,
    )
    run.outcome.write_text(done.model_dump_json(indent=1))
    return done


def finalize(
    env: Environment, run: RunFolder, result: RunResult, progress: Progress | None = None
) -> tuple[FinalOutputs | None, str | None]:
    """Re-verify the run's best version, write report.md and the drop-in: (outputs, None), or (None, why not)."""
    from cuda_agent.results import finalize_run

    try:  # the result is what passes again with more input sets, not the run's own check
        return finalize_run(env, run, result, progress=progress), None
    except Exception as e:  # the run's records stay; say why there is no report
        return None, f"finalizing the run failed: {type(e).__name__}: {e}"


def main(argv: list[str]) -> int:
    """`python -m cuda_agent.run REQUEST.json`: a run in its own process, steered through its run
    folder (what `optimize --tui` and the app's resume start)."""
    from cuda_agent.agent.remote import RemoteControl
    from cuda_agent.progress import Progress

    request = RunRequest.model_validate_json(Path(argv[1]).read_text())
    if request.spec.resume is not None and (saved := finished_run(request.spec.resume)) is not None:
        print(finished_line(saved))
        return saved.exit_code
    try:
        opened = open_run(request.spec, request.settings)
    except RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    run_dir = opened[0].workspace.run_folder.path
    remote = RemoteControl(run_dir, approve_mode=request.approve) if request.control else None
    if request.announce is not None:
        request.announce.write_text(str(run_dir))
    # the long steps as lines in the agent's log, and to the app's status line through the control state
    progress = Progress(on_change=remote.activity if remote else None)
    done = run_task(
        request.spec,
        request.settings,
        RunHooks(remote=remote, progress=progress),
        opened=opened,
        settings_record=request.settings_record,
    )
    print(f"{done.stop_reason} after {done.steps} steps; {run_dir}")
    return done.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
