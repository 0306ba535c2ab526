"""Any chat model through litellm: hosted providers by name (openai/..., anthropic/...) and local
OpenAI-compatible servers (vLLM, SGLang, llama.cpp, Ollama) by api_base. litellm is imported on
first use only: its import takes seconds, and neither `cuda-agent --help` nor the GPU machine
should need it. Keys stay in the environment: one is read only to hand it to litellm, never
stored on the object, and key-like text is scrubbed from every error raised."""

from __future__ import annotations

import json
import logging
import os
import time
import warnings
from typing import Any

import tenacity

from cuda_agent.agent.errors import LimitsExceeded, ModelError, error_kind
from cuda_agent.agent.model_options import ModelOptions, official_endpoint, server_window
from cuda_agent.agent.protocol import ModelResponse, ToolCall, Usage
from cuda_agent.agent.text_protocol import parse_action, to_text_messages
from cuda_agent.secrets import Redactor

_LOCAL_PLACEHOLDER_KEY = "no-key"  # local servers ignore it; the OpenAI client insists on one


class LitellmModelConfig(ModelOptions):
    """The model options (the `[llm]` settings, their fields and their price check) and what only the
    client has: the model, its server, how it retries. A run records it, the key variable's name, never
    its value. Without prices (price_in/price_out) a turn is priced by litellm's table for the model's
    name only at the provider's own endpoint; at any other api_base the name may be borrowed (a local
    server called openai/gpt-4o-mini): the turn is unpriced (cost None)."""

    model: str
    api_base: str | None = None
    retries: int = 4
    timeout_s: float = 600.0
    backoff_s: float = 2.0  # first retry waits about this long, doubling each time
    max_backoff_s: float = 60.0


class EmptyReply(Exception):
    """The server answered, but with no choice to read (HTTP 200, `"choices": []`): retried like a 5xx."""

    message = "the server answered with no choices (an empty reply)"


def _litellm():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as cuda_agent/__init__.py: no network
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")  # (again: a caller may have removed them)
    # litellm's TypedDicts make pydantic warn on first use: noise no user can act on
    warnings.filterwarnings("ignore", message=".*ReadOnly. qualifier", category=UserWarning)
    try:
        import litellm
    except ModuleNotFoundError:
        from cuda_agent import install_hint

        raise ModelError(
            "unavailable", f"litellm is not installed: {install_hint('agent')} (or use --script for a scripted model)"
        ) from None

    litellm.suppress_debug_info = True  # no "Give Feedback" banners on stdout
    # its own warnings (price-map fetches, deprecations) are noise no user can act on, and would break
    # the one-line error the commands print; errors still reach us as exceptions
    logging.getLogger("LiteLLM").setLevel(logging.ERROR)
    return litellm


class LitellmModel:
    """The Model protocol (agent/interfaces.py) through litellm."""

    def __init__(self, model: str, api_base: str | None = None, **settings: Any):
        """settings: the other LitellmModelConfig fields: the model options (ModelOptions: tools,
        context_tokens, temperature, max_output_tokens, prices, api_key_env) and retries, timeout_s,
        backoff_s, max_backoff_s; unknown names are an error."""
        self.config = LitellmModelConfig(model=model, api_base=api_base, **settings)
        self.name = model
        self._native: bool | None = self.config.native_tools
        self._window: tuple[int | None, str] | None = None  # (tokens, where from), once asked
        # time.monotonic() by which every query ends, all its attempts and waits together (the loop sets
        # it from --max-wall): each attempt's timeout is at most the time left; past it, LimitsExceeded
        self.deadline: float | None = None

    def query(self, messages: list[dict], tools: list[dict]) -> ModelResponse:
        native = self.native_tools
        kwargs = self._request(messages if native else to_text_messages(messages, tools), tools if native else [])
        litellm = _litellm()
        start = time.monotonic()
        retrying = self._retrying()
        failure = None
        try:
            response = retrying(self._complete, litellm, kwargs)
        except LimitsExceeded:
            raise
        except Exception as e:  # litellm maps every provider's failures onto its exception types
            failure = self._error(e, attempts=retrying.statistics["attempt_number"])
        if failure is not None:
            if failure.kind == "unavailable" and self._time_left() == 0.0:  # the last attempt ran out of time
                raise LimitsExceeded("max_wall_time")
            raise failure  # raised outside `except`: no chained provider text
        retries = retrying.statistics["attempt_number"] - 1
        result = self._to_response(litellm, response, time.monotonic() - start, retries, native)
        if not native:
            turn = sum(1 for m in messages if m.get("role") == "assistant") + 1
            result.tool_calls = parse_action(result.content, call_id=f"text-{turn}", response=result)
        return result

    def _complete(self, litellm, kwargs: dict[str, Any]):
        """One attempt, within the time left; a reply without choices is a failure of its own
        (EmptyReply), not an IndexError."""
        left = self._time_left()
        if left == 0.0:
            raise LimitsExceeded("max_wall_time")
        if left is not None:
            kwargs = {**kwargs, "timeout": min(kwargs["timeout"], left)}
        response = litellm.completion(**kwargs)
        if not getattr(response, "choices", None):
            raise EmptyReply(EmptyReply.message)
        return response

    def _time_left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def context_window(self) -> int | None:
        """The model's window in tokens: --context-tokens, else what a server at api_base reports
        (GET /models), else litellm's table for the name; None when nothing says."""
        if self._window is None:
            self._window = self._find_window()
        return self._window[0]

    @property
    def window_source(self) -> str:
        """Where context_window() came from: context_tokens, server, litellm or unknown."""
        self.context_window()
        return self._window[1] if self._window else "unknown"

    @property
    def max_tokens(self) -> int | None:
        return self.config.max_output_tokens

    def count_tokens(self, messages: list[dict]) -> int | None:
        """litellm's tokenizer for the model's name; None (the loop's estimate) when litellm cannot
        load or rejects a message's shape: an estimate beats a crash."""
        try:
            return int(_litellm().token_counter(model=self.config.model, messages=messages))
        except Exception:
            return None

    def client_config(self) -> dict[str, Any]:
        return self.config.model_dump(mode="json")

    def secret_values(self) -> list[tuple[str, str]]:
        """None beyond client_config's: the key is in the variable api_key_env names (configured_secrets
        reads it), or in the provider's usual one (OPENAI_API_KEY...), redacted by its name."""
        return []

    def _find_window(self) -> tuple[int | None, str]:
        c = self.config
        if c.context_tokens:
            return c.context_tokens, "context_tokens"
        if c.api_base and not official_endpoint(c.api_base):
            key = os.environ.get(c.api_key_env) if c.api_key_env else None
            if n := server_window(c.api_base, c.model, key):
                return n, "server"
        try:
            info = _litellm().get_model_info(c.model)
        except Exception:  # litellm raises for models it has no entry for
            return None, "unknown"
        n = info.get("max_input_tokens") or info.get("max_tokens") or None
        return (n, "litellm") if n else (None, "unknown")

    def resolved(self) -> dict[str, Any]:
        """What the run header records of how this model is called, once decided: the protocol (--tools
        auto resolved), the window and where it came from, and how turns are priced."""
        return {
            "protocol": "native" if self.native_tools else "text",
            "context_tokens": self.context_window(),
            "window_from": self.window_source,
            "pricing": self.pricing,
        }

    @property
    def pricing(self) -> str:
        """How a turn's cost is known: flags (--price-in/--price-out), litellm (its table, at the
        provider's endpoint), or unpriced."""
        c = self.config
        if c.price_in is not None and c.price_out is not None:
            return "flags"
        return "litellm" if official_endpoint(c.api_base) else "unpriced"

    def _cost(self, litellm, response, prompt_tokens: int, completion_tokens: int) -> float | None:
        """Dollars for one reply; None when the price is unknown (see `pricing`), never zero for it."""
        c = self.config
        if c.price_in is not None and c.price_out is not None:  # pricing "flags"
            return (prompt_tokens * c.price_in + completion_tokens * c.price_out) / 1e6
        if self.pricing == "unpriced":
            return None
        try:
            return float(litellm.completion_cost(completion_response=response))
        except Exception:  # no price for this model (new names): unknown, not zero
            return None

    @property
    def native_tools(self) -> bool:
        """Whether tools go to the provider as function definitions (else the text protocol)."""
        if self._native is None:
            try:
                self._native = bool(_litellm().supports_function_calling(model=self.config.model))
            except Exception:
                self._native = False
        return self._native

    def _request(self, messages: list[dict], tools: list[dict]) -> dict[str, Any]:
        c = self.config
        optional = {
            "tools": tools,
            "api_base": c.api_base,
            "temperature": c.temperature,
            "max_tokens": c.max_output_tokens,
            "api_key": self._api_key(),
        }
        return {
            "model": c.model,
            "messages": messages,
            "timeout": c.timeout_s,
            "num_retries": 0,
            "max_retries": 0,  # we retry; litellm and the OpenAI client must not also
            "drop_params": True,  # e.g. temperature on models that take none: drop, don't fail
            **{k: v for k, v in optional.items() if v not in (None, "", [])},
        }  # temperature 0 stays

    def check_key(self) -> None:
        """Raise the ModelError the first request would for want of a key or of litellm (the commands
        ask before any run folder is made); litellm is imported here, as a first request would."""
        self._api_key()

    def _api_key(self) -> str | None:
        c = self.config
        if c.api_key_env:
            key = os.environ.get(c.api_key_env)
            if not key:
                raise ModelError(
                    "auth",
                    f"{c.api_key_env} is not set (llm.api_key_env names it): export it with your API key for {c.model}",
                )
            return key
        litellm = _litellm()  # not installed: that ModelError says how to install it
        try:
            missing = litellm.validate_environment(model=c.model, api_base=c.api_base)["missing_keys"]
        except Exception:
            return None
        # Only plain API keys are checked: cloud credentials (AWS, Vertex) have other sources.
        if missing and all(k.endswith("_API_KEY") for k in missing):
            if c.api_base:
                return _LOCAL_PLACEHOLDER_KEY
            raise ModelError(
                "auth",
                f"set {' or '.join(missing)} to use {c.model} (or name the variable that "
                "holds the key with --api-key-env, setting llm.api_key_env)",
            )
        return None

    def _retrying(self) -> tenacity.Retrying:
        """Up to `retries` more attempts while the failure is "unavailable"; the n-th retry waits
        min(max_backoff_s, backoff_s * 2**n) * uniform(0.5, 1): half of it fixed, half random, and
        never past the deadline (the attempt after it then stops the run at its wall limit)."""
        c = self.config
        half, half_cap = c.backoff_s / 2, c.max_backoff_s / 2
        backoff = tenacity.wait_exponential(multiplier=half, max=half_cap) + tenacity.wait_random_exponential(
            multiplier=half, max=half_cap
        )

        def wait(state: tenacity.RetryCallState) -> float:
            left = self._time_left()
            return backoff(state) if left is None else min(backoff(state), left)

        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(c.retries + 1),
            wait=wait,
            retry=tenacity.retry_if_exception(lambda e: error_kind(e) == "unavailable"),
            reraise=True,
        )  # the provider's own exception, not tenacity's RetryError, reaches _error

    def _error(self, e: Exception, attempts: int) -> ModelError:
        kind = error_kind(e)
        detail = self._scrub(getattr(e, "message", None) or str(e))
        model = self.config.model
        if kind == "context_window":
            return ModelError(kind, self._too_long(detail))
        if kind == "auth":
            who = self.config.api_key_env or "the provider's API key variable"
            return ModelError(kind, f"{model} rejected the API key: check {who} ({detail})")
        if kind == "unavailable":
            return ModelError(
                kind,
                f"{model} still failing after {attempts} attempt(s): {type(e).__name__}; "
                f"wait and retry, or check api_base ({detail})",
            )
        return ModelError(kind, f"{model} rejected the request: {type(e).__name__} ({detail})")

    def _too_long(self, detail: str) -> str:
        """The provider refused the conversation as too long: what the user can do about it."""
        window, source = self._window or (None, "unknown")
        if source == "context_tokens":
            fix = (
                f"--context-tokens {window} is more than {self.config.model} accepts: give the window its "
                "server really has (llama.cpp: its --n_ctx)"
            )
        elif window:
            fix = (
                f"cuda-agent took its window as {window} tokens ({source}); if the server has less, give "
                "--context-tokens N (llama.cpp: its --n_ctx)"
            )
        else:
            fix = "its window is unknown, so nothing was trimmed: give --context-tokens N (llama.cpp: its --n_ctx)"
        return (
            f"the conversation is longer than {self.config.model} accepts ({detail}); {fix}, so old "
            "observations are trimmed to fit, or use a model with a larger window"
        )

    def _scrub(self, text: str) -> str:
        """One line, bounded, with credentials removed (providers sometimes echo the key): the
        redaction records get (the environment's credentials, the configured key, key shapes)."""
        name = self.config.api_key_env
        key = os.environ.get(name) if name else None
        text = Redactor(extra=[(name, key)] if key else []).text(" ".join(text.split()))
        return text if len(text) <= 300 else text[:297] + "..."

    def _to_response(self, litellm, response, latency_s: float, retries: int, native: bool) -> ModelResponse:
        choice = response.choices[0]
        message = choice.message
        calls = []
        for i, call in enumerate(getattr(message, "tool_calls", None) or []):
            args = call.function.arguments
            args = args if isinstance(args, str) else json.dumps(args or {})
            calls.append(ToolCall(id=call.id or f"call-{i}", name=call.function.name or "", arguments=args))
        usage = getattr(response, "usage", None)
        tokens = Usage(
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
        )
        return ModelResponse(
            content=message.content or "",
            tool_calls=calls,
            latency_s=latency_s,
            usage=tokens,
            cost=self._cost(litellm, response, tokens.prompt_tokens, tokens.completion_tokens),
            model=getattr(response, "model", None) or self.config.model,
            raw={
                "finish_reason": choice.finish_reason,
                "id": getattr(response, "id", None),
                "retries": retries,
                "protocol": "native" if native else "text",
            },
        )
