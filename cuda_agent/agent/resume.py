"""Continuing a stopped or killed run from its run folder (`optimize --resume RUN_DIR`).

`resume_run` re-opens the workspace (uncommitted work is committed as a snapshot first) and
rebuilds from the trajectory the conversation as the model saw it and the counters (turns, steps,
tokens, cost, the format-error streak, wall time), so the limits apply to the whole run: resume a run that
hit --max-steps with a higher one. The resumed run appends to the same trajectory: a `resume`
record, the records this module made, then the new turns.

A call without a result (killed mid-turn, or after `finish`) is answered with INTERRUPTED, not
re-run: its edit may be on disk already, its verify may have committed a version. The workspace's
git history is the truth for versions: one committed without an evaluation record is recorded now
and, when the model never saw its result, told to it in a note, so nothing is lost or repeated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuda_agent.agent.protocol import assistant_message
from cuda_agent.environment import Environment
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.settings import ToolSettings
from cuda_agent.records import Header, ModelTurn, Record, ToolResultRecord, UserMessage
from cuda_agent.trajectory import read_trajectory
from cuda_agent.workspace import VersionInfo, Workspace

TRAJECTORY = "trajectory.jsonl"
INTERRUPTED = ("[interrupted: the run stopped before this call's result was recorded, so it may not have run; "
               "the workspace shows what changed; call it again if you still need it]")
AFTER_FINISH = ("The run was resumed with more steps after you called finish: keep improving the kernel, "
                "and call finish again when you are done.")


class ResumeError(Exception):
    """The folder cannot be continued (no trajectory, no header); the message says what to give."""


@dataclass
class ResumeState:
    run_id: str
    messages: list[dict]  # the conversation to continue from
    turns: int = 0  # model turns taken; the next turn is turns + 1
    steps: int = 0  # steps used, as the loop counts them (calls that ran; a turn that ran none: one)
    tokens: int = 0
    cost: float | None = None
    unpriced: int = 0
    format_errors: int = 0  # the streak at the end, so max_format_errors carries over
    wall_s: float = 0.0  # summed over the earlier processes, from record times
    previous_stop: str | None = None  # the last closing's reason; None when the run was killed
    interrupted: list[str] = field(default_factory=list)  # call ids answered with INTERRUPTED
    recovered: list[int] = field(default_factory=list)  # versions whose evaluation record is written now
    records: list[Any] = field(default_factory=list)  # to append after the resume marker, in order


def resume_run(run_dir: Path | str, *, eval_overrides: dict[str, Any] | None = None
               ) -> tuple[Environment, list[dict], ResumeState]:
    """The environment, messages and counters to continue the run in `run_dir` with. The evaluation
    settings and tools are the run's own (from its header), so versions stay comparable;
    `eval_overrides` changes fields such as the device. `messages` is `state.messages`."""
    run_dir = Path(run_dir)
    path = run_dir / TRAJECTORY
    if not path.is_file():
        raise ResumeError(f"{run_dir} holds no {TRAJECTORY}: give the run folder that `optimize` printed")
    records = read_trajectory(path)
    header = records[0] if records else None
    if not isinstance(header, Header):
        raise ResumeError(f"{path} does not start with a header record: the run never started; start it anew")
    workspace = Workspace.open(run_dir)
    # the workspace (its task record and git objects) is within the model's reach; the trajectory,
    # written by the agent outside it, says which task this run is about
    if workspace.record.task.source_hash != header.task.hash:
        raise ResumeError(f"{run_dir}: the workspace's task record (hash {workspace.record.task.source_hash}) is not "
                          f"the task this run started with ({header.task.hash}); start a new run from the task file")
    # a header written by an older release may hold settings since retired: those are dropped
    recorded = {k: v for k, v in header.config.get("eval", {}).items() if k in EvalConfig.model_fields}
    config = EvalConfig.model_validate({**recorded, **(eval_overrides or {})})
    tools = ToolSettings.model_validate({k: v for k, v in header.config.get("tools", {}).items()
                                         if k in ToolSettings.model_fields})
    # the tools the model was offered are the run's own: runs recorded before tool settings were
    # kept say so only through the shell's schema
    tools.allow_shell = any(t.get("function", {}).get("name") == "shell" for t in header.tools)
    env = Environment(workspace, config, tools)
    state = rebuild(records)
    _recover_versions(state, records, workspace.versions())
    if state.previous_stop == "finished":
        _note(state, AFTER_FINISH)
    return env, state.messages, state


def rebuild(records: list[Record]) -> ResumeState:
    """The conversation and counters a trajectory describes; calls without a result are answered."""
    header = records[0]
    state = ResumeState(run_id=header.run_id, messages=[dict(m) for m in header.messages])
    # results by (step, call id): ids repeat across scripts, and an answer made on an earlier
    # resume sits after that resume's marker, not after its turn
    results = {(r.step, r.call_id): r for r in records if r.type == "tool_result"}
    base, start = 0.0, header.time  # wall time before this process, and when its first record was made
    for r in records:
        if r.type in ("header", "resume"):  # a process started
            base, start, state.previous_stop = state.wall_s, r.time, None
        state.wall_s = base + r.time - start  # a killed process: up to its last record
        if r.type == "model_turn":
            _turn(state, r, results)
        elif r.type == "format_error":
            state.format_errors += 1
            state.messages.append({"role": "user", "content": r.message})
        elif r.type == "user_message":
            state.messages.append({"role": "user", "content": r.content})
        elif r.type == "closing":  # its clock is the loop's own, whole-run one (start-up included)
            state.previous_stop, state.wall_s = r.stop_reason, r.wall_s
    return state


def _turn(state: ResumeState, turn: ModelTurn, results: dict) -> None:
    state.turns = turn.step
    state.tokens += turn.prompt_tokens + turn.completion_tokens
    if turn.cost is None:
        state.unpriced += 1
    else:
        state.cost = (state.cost or 0.0) + turn.cost
    state.messages.append(assistant_message(turn.content, turn.tool_calls))  # as the loop built it
    ran = []
    for c in turn.tool_calls:
        result = results.get((turn.step, c.id))
        if result is None:
            result = ToolResultRecord(step=turn.step, call_id=c.id, name=c.name, observation=INTERRUPTED,
                                      status="interrupted", data={"interrupted": True})
            state.records.append(result)
            state.interrupted.append(c.id)
        else:
            ran.append(result)
        state.messages.append({"role": "tool", "tool_call_id": c.id, "content": result.observation})
    # as the loop counts: a call that reached the environment is a step (one cut off by a kill may
    # have), a turn none reached is one
    state.steps += max(1, sum(1 for c in turn.tool_calls
                              if (turn.step, c.id) not in results or results[(turn.step, c.id)].status
                              not in ("rejected", "skipped")))
    ran = [r for r in ran if r.status != "skipped"]
    if ran:  # as the loop counts: all malformed extends the streak, any well-formed call resets it
        state.format_errors = state.format_errors + 1 if all(r.format_error for r in ran) else 0


def _recover_versions(state: ResumeState, records: list[Record], versions: list[VersionInfo]) -> None:
    """Evaluation records for versions the trajectory lacks: from a tool result whose evaluation
    record was cut off, else from the commit's trailers (and then the model is told)."""
    evaluated = {r.commit for r in records if r.type == "evaluation"}
    by_sha = {v.sha: v for v in versions}
    for r in records:  # at the step of the tool result that reported it
        commit = r.data.get("commit") if r.type == "tool_result" else None
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
        _note(state, f"The run was interrupted and resumed. Meanwhile the workspace committed {told}, "
                     "but the result never reached you; it is kept in the workspace history.")


def _describe(v: VersionInfo) -> str:
    timing = f", {v.time_ms:.4f} ms" if v.time_ms is not None else ""
    return f"version {v.version} ({v.status}, reward {v.reward}{timing})"


def _note(state: ResumeState, text: str) -> None:
    state.records.append(UserMessage(step=state.turns, content=text, injected=False))
    state.messages.append({"role": "user", "content": text})
