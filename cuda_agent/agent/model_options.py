"""How the model is called (the `[llm]` settings, and the flags optimize and batch derive from them:
--tools, --context-tokens, --temperature, --max-output-tokens, --price-in/--price-out, --api-key-env),
and two facts about its server that litellm's tables cannot know: whether a price looked up by the
model's name is this server's price, and the context window the server reports. Plain data and the
standard library: no litellm here. A new model option is one field of ModelOptions: its flag, its
setting, `config show` and the litellm client's config (LitellmModelConfig extends ModelOptions) follow."""

from __future__ import annotations

import json
import urllib.request
from typing import Annotated, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cuda_agent.flags import Flag

# the providers' own endpoints: only there is a price looked up by the model's name this server's price
OFFICIAL_HOSTS = {
    "api.openai.com",
    "api.anthropic.com",
    "generativelanguage.googleapis.com",
    "api.mistral.ai",
    "api.deepseek.com",
    "api.groq.com",
    "api.together.xyz",
    "api.fireworks.ai",
    "api.x.ai",
    "api.cohere.com",
    "api.cohere.ai",
}
# where OpenAI-compatible servers put the window in GET /v1/models: vLLM and SGLang (max_model_len),
# llama.cpp's llama-server (meta.n_ctx_train), others (context_length, context_window)
_WINDOW_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length")
SERVER_TIMEOUT_S = 5.0


class ModelOptions(BaseModel):
    """The `[llm]` settings section: how the model is asked. None: the provider's default, or
    litellm's table (window, price), or the server's own report (window). Each field is a flag too
    (cuda_agent/flags.py): its description is the flag's help."""

    model_config = ConfigDict(extra="forbid")

    tools: Annotated[Literal["native", "text", "auto"], Flag()] = Field(
        "auto",
        description=(
            "How tool calls are exchanged: native (the provider's function calling), text (an ```action block in the "
            "reply, for models and servers without it), auto (native when litellm's table says the model has it)."
        ),
    )
    context_tokens: Annotated[int | None, Flag()] = Field(
        None,
        ge=512,
        description=(
            "The model's context window in tokens, e.g. a local server's (llama.cpp: its --n_ctx); old observations "
            "are trimmed to fit it; default: what a server at --api-base reports in /v1/models, else litellm's table."
        ),
    )
    temperature: Annotated[float | None, Flag()] = Field(
        None, ge=0, le=2, description=("Sampling temperature; default: the provider's.")
    )
    max_output_tokens: Annotated[int | None, Flag()] = Field(
        None, ge=1, description=("Tokens one reply may take; default: the provider's.")
    )
    price_in: Annotated[float | None, Flag()] = Field(
        None,
        ge=0,
        description=(
            "USD per million prompt tokens, with --price-out. Without them a turn is priced from litellm's table only "
            "at the provider's own endpoint; with --api-base elsewhere it is unpriced."
        ),
    )
    price_out: Annotated[float | None, Flag()] = Field(
        None, ge=0, description=("USD per million completion tokens, with --price-in.")
    )
    # its name only: the key never enters a setting or a record
    api_key_env: Annotated[str | None, Flag(metavar="VARIABLE")] = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description=(
            "The environment variable that holds the model's API key, e.g. MY_GATEWAY_KEY; default: the "
            "provider's usual one, e.g. OPENAI_API_KEY. Its name only is recorded, never its value."
        ),
    )

    @model_validator(mode="after")
    def _both_prices(self) -> ModelOptions:
        if (self.price_in is None) != (self.price_out is None):
            raise ValueError(
                "give both price_in and price_out (--price-in/--price-out, USD per million prompt "
                "and completion tokens), or neither"
            )
        return self

    @property
    def native_tools(self) -> bool | None:
        """The protocol `tools` asks for: True native, False text, None: as litellm's table says."""
        return {"auto": None, "native": True, "text": False}[self.tools]


def official_endpoint(api_base: str | None) -> bool:
    """Whether requests go to the provider itself (no api_base, or one of its own hosts), so that
    litellm's price and window for the model's name are this server's."""
    if not api_base:
        return True
    return (urlparse(api_base if "//" in api_base else f"//{api_base}").hostname or "").lower() in OFFICIAL_HOSTS


def server_window(
    api_base: str, model: str, api_key: str | None = None, timeout_s: float = SERVER_TIMEOUT_S
) -> int | None:
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
