"""How the model is called (the `[llm]` settings; --tools, --context-tokens, --temperature,
--max-output-tokens, --price-in/--price-out, --api-key-env), and two facts about its server that litellm's
tables cannot know: whether a price looked up by the model's name is this server's price, and the
context window the server reports. Plain data and the standard library: no litellm here."""

from __future__ import annotations

import json
import urllib.request
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, model_validator

# the providers' own endpoints: only there is a price looked up by the model's name this server's price
OFFICIAL_HOSTS = {"api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com", "api.mistral.ai",
                  "api.deepseek.com", "api.groq.com", "api.together.xyz", "api.fireworks.ai", "api.x.ai",
                  "api.cohere.com", "api.cohere.ai"}
# where OpenAI-compatible servers put the window in GET /v1/models: vLLM and SGLang (max_model_len),
# llama.cpp's llama-server (meta.n_ctx_train), others (context_length, context_window)
_WINDOW_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length")
SERVER_TIMEOUT_S = 5.0


class ModelOptions(BaseModel):
    """The `[llm]` settings section: how the model is asked. None: the provider's default, or
    litellm's table (window, price), or the server's own report (window)."""

    model_config = ConfigDict(extra="forbid")

    tools: Literal["auto", "native", "text"] = "auto"  # auto: native when litellm says the model can
    context_tokens: int | None = Field(None, ge=512)  # the model's window; default: the server's report, litellm's
    temperature: float | None = Field(None, ge=0, le=2)
    max_output_tokens: int | None = Field(None, ge=1)  # per reply
    price_in: float | None = Field(None, ge=0)  # USD per million prompt tokens
    price_out: float | None = Field(None, ge=0)  # USD per million completion tokens
    # the environment variable that holds the key (its name only: the key never enters a setting or a record);
    # None: the provider's usual one (OPENAI_API_KEY...), as litellm knows it
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    @model_validator(mode="after")
    def _both_prices(self) -> ModelOptions:
        if (self.price_in is None) != (self.price_out is None):
            raise ValueError("give both price_in and price_out (--price-in/--price-out, USD per million prompt "
                             "and completion tokens), or neither")
        return self

    def client_settings(self) -> dict[str, Any]:
        return {"native_tools": {"auto": None, "native": True, "text": False}[self.tools],
                "context_tokens": self.context_tokens, "temperature": self.temperature,
                "max_tokens": self.max_output_tokens, "price_in": self.price_in, "price_out": self.price_out,
                "api_key_env": self.api_key_env}


def official_endpoint(api_base: str | None) -> bool:
    """Whether requests go to the provider itself (no api_base, or one of its own hosts), so that
    litellm's price and window for the model's name are this server's."""
    if not api_base:
        return True
    return (urlparse(api_base if "//" in api_base else f"//{api_base}").hostname or "").lower() in OFFICIAL_HOSTS


def server_window(api_base: str, model: str, api_key: str | None = None,
                  timeout_s: float = SERVER_TIMEOUT_S) -> int | None:
    """The context window an OpenAI-compatible server reports in GET {api_base}/models for `model`
    (its entry, else the only one listed), or None: not reported, not reachable, not JSON."""
    listed = _get_json(api_base.rstrip("/") + "/models", api_key, timeout_s) or {}
    entries = [e for e in listed.get("data") or [] if isinstance(e, dict)]
    bare = model.split("/", 1)[1] if "/" in model else model
    entry = next((e for e in entries if e.get("id") in (model, bare)), entries[0] if len(entries) == 1 else None)
    if not entry:
        return None
    window = window_of(entry)
    if window and isinstance(entry.get("meta"), dict):  # llama-server: n_ctx_train is the model's; /props the slot's
        window = min(window, _llama_server_ctx(api_base, api_key, timeout_s) or window)
    return window


def _get_json(url: str, api_key: str | None, timeout_s: float) -> dict | None:
    """GET `url`'s JSON object, or None: no such endpoint, a refused connection, HTML."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as r:
            data = json.loads(r.read(1 << 20))
    except Exception:  # the window stays unknown
        return None
    return data if isinstance(data, dict) else None


def _llama_server_ctx(api_base: str, api_key: str | None, timeout_s: float) -> int | None:
    """llama-server's context size (-c), from GET /props at its root."""
    props = _get_json(api_base.rstrip("/").removesuffix("/v1") + "/props", api_key, timeout_s) or {}
    settings = props.get("default_generation_settings")
    n = settings.get("n_ctx") if isinstance(settings, dict) else None
    return n if isinstance(n, int) and n > 0 else None


def window_of(entry: dict) -> int | None:
    """The window in one /models entry: its own keys, then llama-server's `meta` (n_ctx, n_ctx_train)."""
    meta = entry.get("meta")
    meta = meta if isinstance(meta, dict) else {}
    values = [entry.get(k) for k in _WINDOW_KEYS] + [meta.get("n_ctx"), meta.get("n_ctx_train")]
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0), None)
