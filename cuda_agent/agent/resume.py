"""Continuing a stopped or killed run from its run folder (`optimize --resume RUN_DIR`).

`resume_run` re-opens the workspace (uncommitted work is committed as a snapshot first) and
rebuilds from the trajectory (agent/history.py) the conversation as the model saw it, trims
included, and the counters (turns, steps, tokens, cost, the format-error streak, wall time), so
the limits apply to the whole run: resume a run that hit --max-steps with a higher one. The
resumed run appends to the same trajectory: a `resume` record, the records this module made, then
the new turns.

A call without a result (killed mid-turn, or after `finish`) is answered with INTERRUPTED, not
re-run: its edit may be on disk already, its verify may have committed a version. The harness's
verdict ledger (workspace/ledger.py) is the truth for versions: one it recorded without an
evaluation record in the trajectory is recorded now and, when the model never saw its result,
told to it in a note, so nothing is lost or repeated. A commit the model made itself (reward
trailers written with git in its shell) is no version: the ledger holds no evaluation of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cuda_agent.agent.history import ResumeState, rebuild
from cuda_agent.environment import Environment
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.records import Header, Record, ToolResultRecord, UserMessage
from cuda_agent.run_folder import RunFolder
from cuda_agent.tools.settings import ToolSettings
from cuda_agent.trajectory import read_trajectory
from cuda_agent.untrusted_files import UnreadableFile
from cuda_agent.workspace import VersionInfo, Workspace

AFTER_FINISH = (
    "The run was resumed with more steps after you called finish: keep improving the kernel, "
    "and call finish again when you are done."
)


class ResumeError(Exception):
    """The folder cannot be continued (no trajectory, no header); the message says what to give."""


def resume_run(
    run_dir: Path | str, *, eval_overrides: dict[str, Any] | None = None
) -> tuple[Environment, list[dict], ResumeState]:
    """The environment, messages and counters to continue the run in `run_dir` with. The evaluation
    settings and tools are the run's own (from its header), so versions stay comparable;
    `eval_overrides` changes fields such as the device. `messages` is `state.messages`."""
    run = RunFolder(Path(run_dir))
    run_dir, path = run.path, run.trajectory
    if not path.is_file():
        if run.workspace.is_dir():  # optimize made it, and the run failed before its first record
            raise ResumeError(
                f"{run_dir} holds no {path.name}: its run failed before it started ({run.error_log.name} "
                "there says why, if it is there), so there is nothing to continue: start it anew"
            )
        raise ResumeError(f"{run_dir} holds no {path.name}: give the run folder that `optimize` printed")
    try:
        records = read_trajectory(path)
    except UnreadableFile as e:  # a symlink or a FIFO in its place: never followed (untrusted_files)
        raise ResumeError(f"{e}: give the run folder that `optimize` printed") from None
    header = records[0] if records else None
    if not isinstance(header, Header):
        raise ResumeError(f"{path} does not start with a header record: the run never started; start it anew")
    workspace = Workspace.open(run_dir)
    # the workspace (its task record and git objects) is within the model's reach; the trajectory,
    # written by the agent outside it, says which task this run is about
    if workspace.record.task.source_hash != header.task.hash:
        raise ResumeError(
            f"{run_dir}: the workspace's task record (hash {workspace.record.task.source_hash}) is not "
            f"the task this run started with ({header.task.hash}); start a new run from the task file"
        )
    # a header written by an older release may hold settings since retired: those are dropped
    recorded = {k: v for k, v in header.config.get("eval", {}).items() if k in EvalConfig.model_fields}
    config = EvalConfig.model_validate({**recorded, **(eval_overrides or {})})
    tools = ToolSettings.model_validate(
        {k: v for k, v in header.config.get("tools", {}).items() if k in ToolSettings.model_fields}
    )
    # the tools the model was offered are the run's own: runs recorded before tool settings were
    # kept say so only through the shell's schema
    tools.allow_shell = any(t.get("function", {}).get("name") == "shell" for t in header.tools)
    env = Environment(workspace, config, tools)
    state = rebuild(records)
    _recover_versions(state, records, workspace.versions())
    if state.previous_stop == "finished":
        _note(state, AFTER_FINISH)
    return env, state.messages, state


def _recover_versions(state: ResumeState, records: list[Record], versions: list[VersionInfo]) -> None:
    """Evaluation records for versions the trajectory lacks (`versions`: the ledger's): at the step
    of a tool result whose evaluation record was cut off, else at the last turn (and the model is told)."""
    evaluated = {r.commit for r in records if r.type == "evaluation"}
    by_sha = {v.sha: v for v in versions}
    for r in records:  # at the step of the tool result that reported it
        if not isinstance(r, ToolResultRecord):
            continue
        commit = r.data.get("commit")
        if commit in by_sha and commit not in evaluated:
            state.records.append(by_sha[commit].evaluation(r.step))
            state.recovered.append(by_sha[commit].version)
            evaluated.add(commit)
    unseen = [v for v in versions if v.sha not in evaluated]
    for v in unseen:
        state.records.append(v.evaluation(state.turns))
        state.recovered.append(v.version)
    if unseen:
        told = "; ".join(_describe(v) for v in unseen)
        _note(
            state,
            f"The run was interrupted and resumed. Meanwhile the workspace committed {told}, "
            "but the result never reached you; it is kept in the workspace history.",
        )


def _describe(v: VersionInfo) -> str:
    timing = f", {v.time_ms:.4f} ms" if v.time_ms is not None else ""
    return f"version {v.version} ({v.status}, reward {v.reward}{timing})"


def _note(state: ResumeState, text: str) -> None:
    state.records.append(UserMessage(step=state.turns, content=text, injected=False))
    state.messages.append({"role": "user", "content": text})
