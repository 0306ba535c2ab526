"""The few exceptions that steer the agent loop (mini-swe-agent style): each one says what to do
in its message, in one line, so the loop can show it to the model or to the user unchanged."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from cuda_agent.agent.protocol import ModelResponse

ModelErrorKind = Literal["auth", "context_window", "bad_request", "unavailable"]
# litellm maps every provider's failures onto these exception types (and HTTP statuses)
_RETRYABLE = frozenset(
    {
        "RateLimitError",
        "Timeout",
        "APIConnectionError",
        "InternalServerError",
        "ServiceUnavailableError",
        "BadGatewayError",
        "EmptyReply",
    }
)
_AUTH = frozenset({"AuthenticationError", "PermissionDeniedError"})


class FormatError(Exception):
    """The model's answer could not be read as an action. The message tells the model the exact
    format; `response` (when the model client raised it) is the answer that failed, so the loop
    can still record the turn and its cost."""

    def __init__(self, message: str, response: ModelResponse | None = None):
        super().__init__(message)
        self.response = response


class ModelError(Exception):
    """The model could not be queried: bad key, prompt too long, a rejected request, or the
    provider still failing after retries. Never carries an API key."""

    def __init__(self, kind: ModelErrorKind, message: str):
        super().__init__(message)
        self.kind = kind

    def __repr__(self) -> str:
        return f"ModelError(kind={self.kind!r}, message={str(self)!r})"


class RunEnded(Exception):
    """The run ends for a reason that is not an error (finished, a target, a limit, a stop, a task
    that cannot be scored); `reason` is the closing record's stop_reason, `detail` its error line."""

    def __init__(self, reason: str, detail: str | None = None):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


class StopRequested(RunEnded):
    """A person asked the run to stop (the TUI's stop); everything is kept and it can be resumed."""


class LimitsExceeded(RunEnded):
    """A run limit (steps, dollars, tokens, wall time) was reached; `reason` names it."""


def error_kind(e: BaseException) -> ModelErrorKind:
    """What a model client's exception means for the run; only "unavailable" is worth another attempt."""
    kinds = {cls.__name__ for cls in type(e).__mro__}
    status = getattr(e, "status_code", None)
    if "ContextWindowExceededError" in kinds:
        return "context_window"
    if kinds & _AUTH or status in (401, 403):
        return "auth"
    if kinds & _RETRYABLE or status in (408, 409, 429) or (isinstance(status, int) and status >= 500):
        return "unavailable"
    return "bad_request"
