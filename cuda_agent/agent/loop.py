"""The agent: a short ReAct loop. Each turn the model answers with tool calls, the environment runs
them in order, the observations go back; every step is written to the trajectory as it happens, and
the closing record whatever ended the run (finish, a target, a limit, format errors, a model error,
a task that cannot be scored, ^C).

The history is always native-style; a text-protocol model's client rewrites it (text_protocol.py).
A malformed call (unknown tool, bad JSON, invalid arguments) still goes to the registry, whose error
the model reads after "Format error:"; a turn is a format error when none of its calls was
well-formed. The approval hook sees every well-formed call of a turn before the first one runs.
Steps (what --max-steps counts): every tool call that runs is one (a malformed one too), a turn that
runs none is one; calls a limit holds back (limits.py) are answered "skipped" and never run.
Records' `step` is the model turn's number. Every text put into the history goes through a Redactor
holding the environment's credentials and the model's keys (secrets.py). The history is trimmed to
the model's window (context.py); the trajectory keeps the full observations.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from pydantic import BaseModel, ValidationError

from cuda_agent.agent.context import TokenCounter, approx_tokens, context_budget, counter_for, fit_messages, too_long
from cuda_agent.agent.errors import FormatError, LimitsExceeded, ModelError, RunEnded
from cuda_agent.agent.header import protocol_of, run_config, run_header
from cuda_agent.agent.interrupts import InterruptLatch
from cuda_agent.agent.limits import AgentConfig
from cuda_agent.agent.prompts import env_task_message, system_message
from cuda_agent.agent.protocol import (
    Approval,
    Decision,
    ModelResponse,
    ToolCall,
    assistant_message,
    valid_arguments,
    valid_response,
)
from cuda_agent.agent.text_protocol import FORMAT_HELP
from cuda_agent.records import (
    CallRecord,
    Closing,
    FormatErrorRecord,
    ModelTurn,
    Resume,
    ToolResultRecord,
    Trim,
    UserMessage,
    valid_text,
)
from cuda_agent.secrets import Redactor, configured_secrets, scrub_config
from cuda_agent.trajectory import TrajectoryWriter
from cuda_agent.workspace import VersionInfo
from cuda_agent.workspace.ledger import LedgerError

if TYPE_CHECKING:
    from cuda_agent.agent.interfaces import AgentEnvironment, Model
    from cuda_agent.agent.resume import ResumeState

LOW_WATER = 0.8  # a trimming pass goes down to this share of the budget, so passes are rare
NO_CALL_NATIVE = (
    "Your last reply called no tool. Every turn must call one of the tools; call `finish` when you are done."
)


@dataclass
class RunResult:
    stop_reason: str
    best: VersionInfo | None
    steps: int
    tokens: int
    cost: float | None  # sum over priced turns; None when no turn had a price (see unpriced_turns)
    unpriced_turns: int
    wall_s: float
    error: str | None = None  # the model's or the harness's error text, when one ended the run


class Agent:
    def __init__(
        self,
        model: Model,
        env: AgentEnvironment,
        config: AgentConfig,
        writer: TrajectoryWriter,
        approval: Approval | None = None,
        inbox: Callable[[], list[str]] | None = None,
        checkpoint: Callable[[], None] | None = None,
        settings_record: dict | None = None,
    ):
        self.model, self.env, self.config, self.writer = model, env, config, writer
        self.approval, self.inbox, self.checkpoint = approval, inbox, checkpoint
        self.settings_record = settings_record  # the run's resolved settings and their origins
        keys = configured_secrets(model)  # the model's api key(s): redacted like the environment's
        self.redact = Redactor(extra=keys)
        if keys:
            env.add_secrets(*keys)
            writer.add_secrets(*keys)
        self.native = model.native_tools
        self.tools = env.tool_schemas()
        # argument models to tell a malformed call from a failing one
        self.tool_args: dict[str, type[BaseModel]] = {t.name: t.Args for t in env.tools}
        self.messages: list[dict] = []
        self.steps = self.tokens = self.unpriced = self.format_errors = 0  # steps: see the module's docstring
        self.unscorable: str | None = None  # set by an evaluation that found the task itself cannot be scored
        self.turns = 0  # model turns: records' `step`
        self.cost: float | None = None
        self.started = time.monotonic()
        self.count_tokens: TokenCounter = approx_tokens  # counter_for(model) once the run starts
        self.budget: int | None = None  # history tokens allowed; None: the window is unknown, no trimming

    def run(self, run_id: str | None = None, resume: ResumeState | None = None) -> RunResult:
        reason, error = "error", None
        try:
            if resume is None:
                system = system_message(native_tools=self.native)
                task = env_task_message(self.env, limits=self.config.model_dump())
                self.messages = [
                    {"role": "system", "content": self.redact.text(system)},
                    {"role": "user", "content": self.redact.text(task)},
                ]
                self.writer.write(
                    run_header(
                        run_id or uuid.uuid4().hex[:12], self.model, self.env, self._config(), self.messages, self.tools
                    )
                )
            else:
                self._resume(resume)
            if self.config.max_wall_s is not None:  # its requests end by then
                self.model.deadline = self.started + self.config.max_wall_s
            self.count_tokens = counter_for(self.model)
            self.budget = context_budget(self.model, self.tools, self.count_tokens)
            with InterruptLatch() as latch:  # a Ctrl-C Python swallowed still ends the run (interrupts.py)
                while True:
                    latch.check()
                    self.step()
        except RunEnded as e:  # finished, target_reached, format_errors, a limit, a stop, unscorable
            reason, error = e.reason, e.detail
        except ModelError as e:
            reason, error = f"model_error:{e.kind}", str(e)
        except KeyboardInterrupt:
            reason = "interrupted"
        except Exception as e:  # a bug: still closed in the record, then raised
            reason, error = "error", f"{type(e).__name__}: {e}"
            raise
        finally:  # the closing record, whatever ended the run; the best is the verdict ledger's
            try:
                best = self.env.workspace.best()
            except LedgerError as e:  # the ledger was tampered with outside the jail: no result, and why
                best, error = None, error or str(e)
            wall = time.monotonic() - self.started
            self.writer.write(
                Closing(
                    stop_reason=reason,
                    best_version=best and best.version,
                    best_commit=best and best.sha,
                    best_reward=best and best.reward,
                    steps=self.steps,
                    tokens=self.tokens,
                    cost=self.cost,
                    unpriced_turns=self.unpriced,
                    wall_s=wall,
                    error=error,
                )
            )
        return RunResult(reason, best, self.steps, self.tokens, self.cost, self.unpriced, wall, error)

    def step(self) -> None:
        """One turn: pause or stop if asked, check limits, take injected messages, query, run the calls."""
        if self.checkpoint:
            self.checkpoint()
        if reason := self.config.exceeded(self.steps, self.cost, self.tokens, self.started):
            raise LimitsExceeded(reason)
        for text in self.inbox() if self.inbox else []:
            text = self.redact.text(valid_text(text))
            self.writer.write(UserMessage(step=self.turns, content=text))
            self.messages.append({"role": "user", "content": text})
        self._trim()
        try:
            response, problem = self.model.query(self.messages, self.tools), None
        except FormatError as e:  # the client could not read an action; the answer still cost tokens
            response, problem = e.response or ModelResponse(), self.redact.text(valid_text(str(e)))
        response = valid_response(response)  # no lone surrogate reaches a file, git or the next request
        self.turns += 1
        self._account(response)
        calls = [
            c if c.id else c.model_copy(update={"id": f"call-{self.turns}-{i}"})
            for i, c in enumerate(response.tool_calls)
        ]
        if problem is not None:
            calls = []  # nothing of an unreadable answer runs
        elif not calls:
            problem = NO_CALL_NATIVE if self.native else f"Your reply had no action. {FORMAT_HELP}"
        allowed = min(self.config.max_calls_per_turn, self.config.max_steps - self.steps)  # the rest: skipped
        malformed = [self._malformed(c) for c in calls]
        decisions = [
            None if bad or i >= allowed or not self.approval else self._approve(self.approval, c)
            for i, (c, bad) in enumerate(zip(calls, malformed))
        ]
        self._record_turn(response, calls, decisions)
        if problem is not None:
            self.steps += 1
            self.writer.write(FormatErrorRecord(step=self.turns, message=problem))
            self.messages.append({"role": "user", "content": problem})
            self._format_error()
            return
        evaluated, tried, before = False, [], self.steps
        try:
            for i, (call, bad, decision) in enumerate(zip(calls, malformed, decisions)):
                if skipped := self.config.held_back(i, len(calls), allowed, self.started):
                    limit, observation = skipped
                    self._answer(call, observation, "skipped", data={"skipped": limit})
                    continue
                tried.append(bad)
                done, reward = self._execute(call, bad, decision)
                evaluated |= reward is not None
                if done:
                    raise RunEnded("finished")
                if self.unscorable:  # no version of any kernel can be scored: more turns cannot help
                    raise RunEnded("unscorable", self.unscorable)
        finally:
            if self.steps == before:
                self.steps += 1  # a turn that ran no tool (all rejected or skipped) is a step too
        if tried and all(tried):
            self._format_error()
        elif tried:
            self.format_errors = 0
        if evaluated and self.config.target_met(self.env.workspace.best()):
            raise RunEnded("target_reached")

    def _answer(self, call: ToolCall, observation: str, status: str, **record) -> None:
        self.writer.write(
            ToolResultRecord(
                step=self.turns, call_id=call.id, name=call.name, observation=observation, status=status, **record
            )
        )
        self.messages.append({"role": "tool", "tool_call_id": call.id, "content": observation})

    def _trim(self) -> None:  # a history that cannot fit stops the run here, saying what would help
        if self.budget is None:
            return
        trimmed, notes, tokens = fit_messages(
            self.messages, self.budget, self.count_tokens, target_tokens=int(self.budget * LOW_WATER)
        )
        if notes:
            self.writer.write(
                Trim(
                    step=self.turns,
                    removed=[n.model_dump() for n in notes],
                    tokens_before=self.count_tokens(self.messages),
                    tokens_after=self.count_tokens(trimmed),
                )
            )
            self.messages = trimmed
        if tokens > self.budget:
            raise ModelError(
                "context_window", too_long(self.model, self.tools, self.count_tokens, tokens, self.budget, self.turns)
            )

    def _resume(self, s: ResumeState) -> None:
        """Continue from a rebuilt history: counters restored, the marker and resume's records written."""
        self.messages = s.messages
        self.steps, self.turns, self.tokens, self.cost, self.unpriced = s.steps, s.turns, s.tokens, s.cost, s.unpriced
        self.format_errors = s.format_errors
        self.started = time.monotonic() - s.wall_s
        self.writer.write(
            Resume(
                step=s.turns,
                model=self.model.name,
                config=scrub_config(self._config()),
                protocol=protocol_of(self.model),
                previous_stop=s.previous_stop,
                interrupted_calls=s.interrupted,
                recovered_versions=s.recovered,
            )
        )
        for record in s.records:
            self.writer.write(record)

    def _execute(self, call: ToolCall, malformed: bool, decision: Decision | None) -> tuple[bool, int | None]:
        if decision is not None and not decision.approve:
            observation = f"A person rejected this call: {decision.reason or 'no reason given'}"
            self._answer(call, self.redact.text(valid_text(observation)), "rejected")
            return False, None
        edited = decision.edited_arguments if decision else None
        self.steps += 1  # it reaches the environment: a step
        out = self.env.step(call.name, call.arguments if edited is None else edited)
        r = out.result
        observation = f"Format error: {r.observation}" if malformed else r.observation
        self.unscorable = out.unscorable
        # the environment redacted already; this covers the rest (and a non-UTF-8 file name's surrogates)
        self._answer(
            call,
            self.redact.text(valid_text(observation)),
            r.status,
            seconds=r.seconds,
            data=r.record_data(),
            format_error=malformed,
        )
        if r.version is not None:  # an evaluation committed as a version: its record, from the same metrics
            self.writer.write(r.version.evaluation(self.turns))
        return out.done, out.reward

    def _approve(self, approval: Approval, call: ToolCall) -> Decision:
        d = approval(call)
        edited = d.edited_arguments  # a person's arguments are cleaned like the model's
        return d if edited is None else d.model_copy(update={"edited_arguments": valid_arguments(edited)})

    def _malformed(self, call: ToolCall) -> bool:
        """Unknown tool, unreadable or invalid arguments: the registry answers, and it is a format error."""
        if call.name not in self.tool_args:
            return True
        try:
            args = json.loads(call.arguments) if call.arguments.strip() else {}
            if not isinstance(args, dict):
                return True
            self.tool_args[call.name].model_validate(args)
        except (json.JSONDecodeError, ValidationError):
            return True
        return False

    def _record_turn(self, r: ModelResponse, calls: list[ToolCall], decisions: list[Decision | None]) -> None:
        records = []
        for c, d in zip(calls, decisions):
            edited = d.edited_arguments if d is not None and d.approve else None
            records.append(
                CallRecord(
                    id=c.id,
                    name=c.name,
                    arguments=c.arguments if edited is None else edited,
                    original_arguments=None if edited is None else c.arguments,
                )
            )
        self.writer.write(
            ModelTurn(
                step=self.turns,
                content=r.content,
                tool_calls=records,
                prompt_tokens=r.usage.prompt_tokens,
                completion_tokens=r.usage.completion_tokens,
                cost=r.cost,
                latency_s=r.latency_s,
                edited_by_person=any(c.original_arguments is not None for c in records),
                injected=bool(r.raw.get("injected")),
            )
        )
        self.messages.append(assistant_message(r.content, records))

    def _account(self, r: ModelResponse) -> None:
        self.tokens += r.usage.prompt_tokens + r.usage.completion_tokens
        self.unpriced += r.cost is None
        self.cost = self.cost if r.cost is None else (self.cost or 0.0) + r.cost

    def _format_error(self) -> None:
        self.format_errors += 1
        if self.format_errors >= self.config.max_format_errors:
            raise RunEnded("format_errors")

    def _config(self) -> dict:
        return run_config(self.model, self.env, self.config, self.settings_record)


def run_agent(
    model: Model,
    env: AgentEnvironment,
    config: AgentConfig,
    writer: TrajectoryWriter,
    *,
    approval: Approval | None = None,
    inbox: Callable[[], list[str]] | None = None,
    checkpoint: Callable[[], None] | None = None,
    run_id: str | None = None,
    resume_state: ResumeState | None = None,
    settings_record: dict | None = None,
) -> RunResult:
    """Drive `env` with `model` until a stop reason; the trajectory goes to `writer`. `approval` is
    asked before each well-formed call; `inbox` is polled before each query for a person's messages;
    `checkpoint` runs before each turn (it may block while paused, or raise StopRequested).
    `resume_state` (resume.resume_run) continues a run whose trajectory `writer` appends to."""
    return Agent(model, env, config, writer, approval, inbox, checkpoint, settings_record).run(run_id, resume_state)
