"""The conversation a trajectory describes, as the model was shown it: one reading of the records
that both `--resume` (agent/resume.py) and the training export (train/export.py) use, so what a
resumed model continues from and what a trainer is given cannot drift apart.

The history is rebuilt in the order the loop built it: the header's system and task messages, each
model turn (as the loop put it in the history: protocol.assistant_message) with its tool results,
the format-error feedback sent after a turn the loop could not act on, a person's messages and the
notes a resume added; each `trim` record is replayed where it was made (context.replay_trim), so an
observation or source the loop shortened reads shortened from there on, as the model saw it. A call
without a result (the run was killed mid-turn) is answered with INTERRUPTED, as a resume tells the
model. The counters (turns, steps, tokens, cost, format-error streak, wall time) come with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cuda_agent.agent.context import replay_trim
from cuda_agent.agent.protocol import assistant_message
from cuda_agent.records import Header, ModelTurn, Record, ToolResultRecord

INTERRUPTED = (
    "[interrupted: the run stopped before this call's result was recorded, so it may not have run; "
    "the workspace shows what changed; call it again if you still need it]"
)


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
    turn_messages: list[int] = field(default_factory=list)  # index in `messages` of each model turn, in order
    # the history as it stood before each trim, and how many turns it held: what the model had been
    # sent until then (the export's records end there, so no turn is trained on a text it never saw)
    before_trims: list[tuple[list[dict], int]] = field(default_factory=list)


def rebuild(records: list[Record]) -> ResumeState:
    """The conversation and counters a trajectory describes; calls without a result are answered."""
    header = records[0] if records else None
    if not isinstance(header, Header):
        raise ValueError("a trajectory to rebuild starts with its header record")
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
        elif r.type == "trim":
            state.before_trims.append((list(state.messages), len(state.turn_messages)))
            state.messages = replay_trim(state.messages, r.removed)
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
    state.turn_messages.append(len(state.messages))
    state.messages.append(assistant_message(turn.content, turn.tool_calls))  # as the loop built it
    ran, reached = [], 0
    for c in turn.tool_calls:
        result = results.get((turn.step, c.id))
        if result is None:
            result = ToolResultRecord(
                step=turn.step,
                call_id=c.id,
                name=c.name,
                observation=INTERRUPTED,
                status="interrupted",
                data={"interrupted": True},
            )
            state.records.append(result)
            state.interrupted.append(c.id)
        elif result.status != "skipped":
            ran.append(result)
        reached += result.status not in ("rejected", "skipped")
        state.messages.append({"role": "tool", "tool_call_id": c.id, "content": result.observation})
    # as the loop counts: a call that reached the environment is a step (one cut off by a kill may
    # have), a turn none reached is one
    state.steps += max(1, reached)
    if ran:  # as the loop counts: all malformed extends the streak, any well-formed call resets it
        state.format_errors = state.format_errors + 1 if all(r.format_error for r in ran) else 0
