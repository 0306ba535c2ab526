"""LitellmModel through litellm's real HTTP path, against the loopback server (no network, no key)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from cuda_agent.agent.errors import FormatError, ModelError
from cuda_agent.agent.litellm_model import LitellmModel
from cuda_agent.agent.text_protocol import FORMAT_HELP

# find_spec, not importorskip: importing litellm here, before LitellmModel sets its offline
# cost-map option, would let it fetch prices from the network.
if importlib.util.find_spec("litellm") is None:
    pytest.skip("litellm is not installed (pip install -e '.[dev]')", allow_module_level=True)

SECRET = "sk-test-SECRET-0123456789"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "compile",
            "description": "Build the kernels.",
            "parameters": {"type": "object", "properties": {"verbose": {"type": "boolean"}}},
        },
    }
]
MESSAGES = [{"role": "system", "content": "You write CUDA kernels."}, {"role": "user", "content": "Make it fast."}]


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("FAKE_LLM_KEY", SECRET)


def make(server, **kw) -> LitellmModel:
    kw.setdefault("tools", "native")
    return LitellmModel(
        "openai/fake-model",
        api_base=server.base_url,
        api_key_env="FAKE_LLM_KEY",
        backoff_s=0.01,
        max_backoff_s=0.05,
        **kw,
    )


def test_native_tool_call_round_trip(fake_openai):
    fake_openai.reply(
        content="Building first.",
        prompt_tokens=120,
        completion_tokens=30,
        tool_calls=[{"id": "call_abc", "name": "compile", "arguments": {"verbose": True}}],
    )
    r = make(fake_openai).query(MESSAGES, TOOLS)
    assert r.content == "Building first."
    calls = [(c.id, c.name, json.loads(c.arguments)) for c in r.tool_calls]
    assert calls == [("call_abc", "compile", {"verbose": True})]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (120, 30)
    assert r.cost is None  # litellm has no price for "fake-model": unknown, not zero, no crash
    assert r.raw["finish_reason"] == "tool_calls" and r.raw["retries"] == 0
    (req,) = fake_openai.chat_requests
    assert req["body"]["tools"][0]["function"]["name"] == "compile"
    assert req["body"]["messages"] == MESSAGES
    assert req["headers"]["authorization"] == f"Bearer {SECRET}"  # the key from api_key_env was used


def test_malformed_tool_arguments_come_back_raw(fake_openai):
    fake_openai.reply(tool_calls=[{"name": "compile", "arguments": '{"verbose": tru'}])
    (call,) = make(fake_openai).query(MESSAGES, TOOLS).tool_calls
    assert call.arguments == '{"verbose": tru'  # the loop turns this into a format error


def test_a_local_server_named_like_a_priced_model_is_unpriced(fake_openai):
    """A local server called as openai/gpt-4o-mini is not gpt-4o-mini: its turns have no price."""
    fake_openai.model = "gpt-4o-mini"
    fake_openai.reply(content="ok", prompt_tokens=1000, completion_tokens=1000)
    model = LitellmModel("openai/gpt-4o-mini", api_base=fake_openai.base_url, api_key_env="FAKE_LLM_KEY")
    assert model.pricing == "unpriced"
    assert model.query(MESSAGES, []).cost is None


def test_given_prices_are_per_million_tokens(fake_openai):
    fake_openai.reply(content="ok", prompt_tokens=3000, completion_tokens=1000)
    r = make(fake_openai, price_in=0.5, price_out=2.0).query(MESSAGES, TOOLS)
    assert r.cost == pytest.approx((3000 * 0.5 + 1000 * 2.0) / 1e6)
    fake_openai.reply(content="ok", prompt_tokens=3000, completion_tokens=1000)
    assert make(fake_openai, price_in=0.0, price_out=0.0).query(MESSAGES, TOOLS).cost == 0.0  # free, not unknown


def test_at_the_providers_own_endpoint_the_names_price_is_used(fake_openai):
    import litellm

    fake_openai.model = "gpt-4o-mini"
    fake_openai.reply(content="ok", prompt_tokens=1000, completion_tokens=1000)
    response = litellm.completion(
        model="openai/gpt-4o-mini", api_base=fake_openai.base_url, api_key="x", messages=MESSAGES
    )
    official = LitellmModel("openai/gpt-4o-mini")  # no api_base: api.openai.com
    assert official.pricing == "litellm" and official._cost(litellm, response, 1000, 1000) > 0
    assert LitellmModel("openai/gpt-4o-mini", api_base="https://api.openai.com/v1").pricing == "litellm"


def test_one_price_without_the_other_is_refused():
    with pytest.raises(ValueError, match="price_in and price_out"):
        LitellmModel("openai/fake-model", price_in=1.0)


def test_rate_limit_then_success_is_retried(fake_openai):
    fake_openai.fail(429, "slow down", times=2)
    fake_openai.reply(content="done")
    r = make(fake_openai).query(MESSAGES, TOOLS)
    assert r.content == "done" and r.raw["retries"] == 2
    assert len(fake_openai.chat_requests) == 3


def test_timeout_is_retried(fake_openai):
    fake_openai.reply(content="too late", delay_s=2.0)
    fake_openai.reply(content="in time")
    assert make(fake_openai, timeout_s=0.3).query(MESSAGES, TOOLS).content == "in time"
    assert len(fake_openai.chat_requests) == 2


def test_no_hidden_retries_below_ours(fake_openai):
    fake_openai.fail(429, "slow down", times=3)
    with pytest.raises(ModelError) as e:
        make(fake_openai, retries=0).query(MESSAGES, TOOLS)
    assert e.value.kind == "unavailable"
    assert len(fake_openai.chat_requests) == 1  # neither litellm nor the OpenAI client retried


def test_server_errors_exhaust_retries(fake_openai):
    fake_openai.fail(500, "boom", times=3)
    with pytest.raises(ModelError) as e:
        make(fake_openai, retries=2).query(MESSAGES, TOOLS)
    assert e.value.kind == "unavailable" and "3 attempt" in str(e.value)
    assert len(fake_openai.chat_requests) == 3


@pytest.mark.parametrize("status", [401, 403])
def test_auth_error_is_not_retried_and_never_shows_the_key(fake_openai, status):
    fake_openai.fail(status, "invalid api key", times=3, echo_auth=True)  # the server echoes the key
    with pytest.raises(ModelError) as e:
        make(fake_openai).query(MESSAGES, TOOLS)
    assert e.value.kind == "auth" and "FAKE_LLM_KEY" in str(e.value)
    assert len(fake_openai.chat_requests) == 1
    assert "\n" not in str(e.value)
    for text in (str(e.value), repr(e.value), repr(e.value.__cause__), repr(e.value.__context__)):
        assert "SECRET" not in text
    assert e.value.__cause__ is None and e.value.__context__ is None


def test_context_window_error_is_not_retried_and_names_the_flag(fake_openai):
    fake_openai.fail(
        400,
        "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
        code="context_length_exceeded",
        times=2,
    )
    with pytest.raises(ModelError) as e:
        make(fake_openai).query(MESSAGES, TOOLS)
    assert e.value.kind == "context_window" and len(fake_openai.chat_requests) == 1
    assert "--context-tokens" in str(e.value) and "trim it" not in str(e.value) and "\n" not in str(e.value)


def test_bad_request_is_not_retried(fake_openai):
    fake_openai.fail(400, "unknown parameter 'tools'", times=2)
    with pytest.raises(ModelError) as e:
        make(fake_openai).query(MESSAGES, TOOLS)
    assert e.value.kind == "bad_request" and "unknown parameter" in str(e.value)
    assert len(fake_openai.chat_requests) == 1


def test_missing_key_variable_says_which(fake_openai, monkeypatch):
    monkeypatch.delenv("FAKE_LLM_KEY")
    with pytest.raises(ModelError, match="FAKE_LLM_KEY is not set") as e:
        make(fake_openai).query(MESSAGES, TOOLS)
    assert e.value.kind == "auth" and fake_openai.chat_requests == []


def test_missing_provider_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY") as e:
        LitellmModel("anthropic/claude-sonnet-4-5").query(MESSAGES, TOOLS)
    assert e.value.kind == "auth"


def test_local_server_without_any_key(fake_openai, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake_openai.reply(content="hi")
    model = LitellmModel("openai/fake-model", api_base=fake_openai.base_url, tools="native")
    assert model.query(MESSAGES, TOOLS).content == "hi"


def test_text_protocol_when_the_model_has_no_native_tools(fake_openai):
    fake_openai.reply(content='Compile first.\n```action\n{"tool": "compile", "arguments": {"verbose": false}}\n```')
    model = make(fake_openai, tools="auto")  # litellm knows nothing of fake-model: text protocol
    assert model.native_tools is False
    r = model.query(MESSAGES, TOOLS)
    calls = [(c.id, c.name, json.loads(c.arguments)) for c in r.tool_calls]
    assert calls == [("text-1", "compile", {"verbose": False})]
    assert r.raw["protocol"] == "text"
    body = fake_openai.chat_requests[0]["body"]
    assert "tools" not in body
    assert FORMAT_HELP in body["messages"][0]["content"] and "## compile" in body["messages"][0]["content"]


def test_text_protocol_format_error_keeps_the_response(fake_openai):
    fake_openai.reply(content="```action\n{not json}\n```", prompt_tokens=50)
    with pytest.raises(FormatError) as e:
        make(fake_openai, tools="text").query(MESSAGES, TOOLS)
    assert FORMAT_HELP in str(e.value)
    assert e.value.response.usage.prompt_tokens == 50  # the loop can still count the turn


def test_context_window_from_litellm_or_override():
    assert LitellmModel("openai/gpt-4o-mini").context_window() == 128000
    assert LitellmModel("openai/fake-model").context_window() is None
    model = LitellmModel("openai/fake-model", context_tokens=32768)
    assert (model.context_window(), model.window_source) == (32768, "context_tokens")


def test_context_window_from_the_servers_models_list(fake_openai):
    fake_openai.model_info = {"max_model_len": 8192}  # vLLM, SGLang
    model = LitellmModel("hosted_vllm/fake-model", api_base=fake_openai.base_url)
    assert (model.context_window(), model.window_source) == (8192, "server")
    given = LitellmModel("hosted_vllm/fake-model", api_base=fake_openai.base_url, context_tokens=4096)
    assert given.context_window() == 4096  # the flag wins over the server


def test_llama_server_reports_its_context_size_in_props(fake_openai):
    fake_openai.model_info = {"meta": {"n_ctx_train": 8192, "n_vocab": 49152}}
    fake_openai.props = {"default_generation_settings": {"n_ctx": 4096}}  # started with -c 4096
    assert LitellmModel("openai/fake-model", api_base=fake_openai.base_url).context_window() == 4096
    fake_openai.props = None
    assert LitellmModel("openai/fake-model", api_base=fake_openai.base_url).context_window() == 8192


def test_a_server_that_reports_no_window_leaves_it_unknown(fake_openai):
    model = LitellmModel("openai/fake-model", api_base=fake_openai.base_url)
    assert (model.context_window(), model.window_source) == (None, "unknown")


def test_config_rejects_unknown_settings():
    with pytest.raises(ValueError, match="temprature"):
        LitellmModel("openai/gpt-4o-mini", temprature=0.2)


def test_importing_the_module_does_not_import_litellm():
    code = (
        "import sys, cuda_agent.agent.litellm_model as m; m.LitellmModel('openai/gpt-4o-mini');"
        "print('litellm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _proxy_connections(code: str, env_extra: dict) -> int:
    """Run `code` in a fresh interpreter whose every outbound HTTP(S) goes to a local proxy that
    only counts connections; loopback stays direct."""
    import os
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    count = []

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            count.append(1)
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    proxy = f"http://127.0.0.1:{listener.getsockname()[1]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITELLM_")}
    env.update(HTTPS_PROXY=proxy, HTTP_PROXY=proxy, https_proxy=proxy, http_proxy=proxy, NO_PROXY="", **env_extra)
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    listener.close()
    return len(count)


@pytest.mark.slow  # two fresh litellm imports, ~10 s each on a slow machine
def test_litellm_never_reaches_the_network():
    ours = (
        "import time; from cuda_agent.agent.litellm_model import LitellmModel as M; m = M('openai/gpt-4o');"
        "assert m.native_tools and m.context_window(); time.sleep(0.5)"
    )
    assert _proxy_connections(ours, {}) == 0
    # The control: imported without our settings, litellm does fetch its price map.
    assert _proxy_connections("import time, litellm; time.sleep(0.5)", {}) > 0
