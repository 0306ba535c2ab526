"""What the agent loop needs from its two partners, written down: a model (Model) and an environment
(AgentEnvironment). The loop reads every member directly, never probing for one, so each model
class (ScriptedModel, LitellmModel, the MCP ClientBridge, tests' fakes) defines them all, with the
neutral value this file gives where a feature does not apply (tests/agent/test_interfaces.py checks
each class against these lists). mypy checks the loop against them (pyproject.toml's [tool.mypy])."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from cuda_agent.agent.protocol import ModelResponse
    from cuda_agent.environment import StepResult
    from cuda_agent.eval.settings import EvalConfig
    from cuda_agent.task import Task
    from cuda_agent.tools.base import Tool
    from cuda_agent.tools.settings import ToolSettings
    from cuda_agent.workspace import Workspace

# where a model's context_window() comes from (Model.window_source); too_long's advice depends on it
WINDOW_SOURCES = ("context_tokens", "server", "litellm", "model", "unknown")


class Model(Protocol):
    """A chat model as the loop drives it. Messages are OpenAI-style chat dicts; tools are OpenAI
    function definitions; every query answers one turn.

    Conventions where a feature does not apply:
    - count_tokens(messages) returns None when the model has no tokenizer of its own (or it failed
      on these messages): the loop then uses context.approx_tokens. Never 0 for "unknown".
    - context_window() returns None when no window is known: the history is never trimmed.
    - window_source is one of WINDOW_SOURCES: "model" when the model itself says (a script),
      "unknown" when context_window() is None.
    - max_tokens is None when the client sets no limit per reply: context.ANSWER_TOKENS are kept.
    - deadline (a time.monotonic() value) is set by the loop from max_wall_s; a model whose queries
      can wait ends each by then (LimitsExceeded("max_wall_time") past it), others ignore it.
    - resolved() and client_config() return {} when there is nothing to record (the header then
      omits "llm"; "model" is {}); secret_values() returns [] when the model holds no key.
    """

    name: str  # what records call the model (a provider's model name, "scripted", "mcp:<client>")
    deadline: float | None

    @property
    def native_tools(self) -> bool:
        """True: tools go to the model as function definitions; False: the text protocol."""
        ...

    @property
    def max_tokens(self) -> int | None:
        """Tokens the client allows one reply (--max-output-tokens); the trimming keeps room for it."""
        ...

    @property
    def window_source(self) -> str:
        """Where context_window() came from (WINDOW_SOURCES)."""
        ...

    def query(self, messages: list[dict], tools: list[dict]) -> ModelResponse:
        """The model's next turn. Raises ModelError (a failure the run ends on), FormatError (an
        unreadable text-protocol action; its response still counts), LimitsExceeded or RunEnded."""
        ...

    def context_window(self) -> int | None:
        """The model's window in tokens, or None."""
        ...

    def count_tokens(self, messages: list[dict]) -> int | None:
        """Tokens `messages` take in the model's own tokenizer, or None (see the class's docstring)."""
        ...

    def resolved(self) -> dict[str, Any]:
        """How this model is called once decided at run time (the header's "llm"): protocol, window..."""
        ...

    def client_config(self) -> dict[str, Any]:
        """The client's settings as the header records them ("model"): names of key variables,
        never a key (scrub_config drops credential-named ones; configured_secrets redacts them)."""
        ...

    def secret_values(self) -> list[tuple[str, str]]:
        """(name, value) of keys the model holds that client_config() does not name: redacted everywhere."""
        ...

    def check_key(self) -> None:
        """Raise the ModelError the first query would for want of a key or of a library (the commands
        ask before a run folder is made); a model that needs neither does nothing."""
        ...


class AgentEnvironment(Protocol):
    """What the loop (and its header, prompt and resume) uses of an environment: cuda_agent.environment.Environment."""

    workspace: Workspace  # best(): the verdict ledger's best version; record.task: the task it was made for
    eval_config: EvalConfig  # recorded in the header; the prompt states its device and settings
    tool_settings: ToolSettings  # recorded in the header (resume offers the same tools again)
    tools: list[Tool]  # each tool's name and Args tell a malformed call from a failing one

    def tool_schemas(self) -> list[dict]:
        """The tools as OpenAI function definitions: what the model is offered."""
        ...

    def step(self, name: str, args: Any) -> StepResult:
        """Run one tool call (args: the model's JSON text, or a dict); never raises for the model's mistakes."""
        ...

    def reference_task(self) -> Task:
        """The task as the workspace was made with it (the prompt shows its source)."""
        ...

    def add_secrets(self, *values: Any) -> None:
        """More values to keep out of observations: plain strings or (name, value) pairs."""
        ...
