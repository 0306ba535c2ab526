"""cuda_agent.secrets: which names and shapes are credentials, redaction by value (plain,
URL-encoded, JSON-escaped) and by shape, nested records, the configured keys, and ordinary output
(compile errors, verdicts, ncu tables) coming through unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from pydantic import BaseModel

from cuda_agent.agent.scripted_model import ScriptedModel
from cuda_agent.secrets import (
    REDACTED,
    Redactor,
    configured_secrets,
    looks_like_credential,
    looks_secret_name,
    scrub_config,
    secret_values,
)

GHP = "ghp_" + "a1B2c3D4e5" * 3 + "xYz123"  # 40 characters, as GitHub's are
ENV = {
    "OPENAI_API_KEY": "sk-test-123",  # short: the old 12-character floor kept it
    "GH_PAT": GHP,
    "DATABASE_URL": "postgres://admin:pw@db/x",
    "PATH": "/usr/local/cuda/bin:/usr/bin:/bin",
    "HOME": "/root",
    "HF_HOME": "/root/.cache/huggingface",
    "CUDA_VISIBLE_DEVICES": "0",
    "XDG_SESSION_DESKTOP": "ubuntu",
    "MAX_TOKENS": "100000",
    "TORCH_CUDA_ARCH_LIST": "9.0",
}


# -- names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GH_PAT",
        "GITHUB_PAT",
        "GH_TOKEN",
        "DATABASE_URL",
        "SENTRY_DSN",
        "PG_DSN",
        "NPM_AUTH",
        "NPM_CONFIG__AUTH",
        "PASSWD",
        "DB_PASSWD",
        "MYSQL_PASSWORD",
        "SMTP_PASS",
        "COOKIE",
        "SESSION_COOKIE",
        "SESSION",
        "FLASK_SESSION",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "my_secret",
        "apiKey",
        "OPENAIKEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "REDIS_URL",
        "MONGODB_URI",
        "SQLALCHEMY_DATABASE_URI",
        "AZURE_STORAGE_CONNECTION_STRING",
        "CI_JOB_JWT",
        "SLACK_WEBHOOK_URL",
        "AUTHORIZATION",
        "PRIVATE_KEY",
        "MYAPIKEYX",
        "PASSWORDFILE",
    ],
)
def test_credential_names(name):
    assert looks_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "GH_PAT",
        "DATABASE_URL",
        "SENTRY_DSN",
        "PG_DSN",
        "NPM_AUTH",
        "MY_AUTH",
        "PASSWD",
        "DB_PASSWD",
        "COOKIE",
        "SESSION_COOKIE",
        "SESSION",
        "APP_SESSION",
        "OPENAI_API_KEY",
        "HF_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
    ],
)
def test_values_of_credential_named_variables_are_redacted(name):
    value = "opaque1"  # 7 characters, no credential shape: only the name says what it is
    redact = Redactor(env={name: value, "PATH": "/usr/bin"})
    assert redact(f"echo {value} > out; {value}") == f"echo [redacted:{name}] > out; [redacted:{name}]"
    assert redact("opaq") == "opaq"  # shorter than 6: left alone (see test_short_values)


def test_short_values():
    # 6 characters and up are redacted wherever they appear; shorter ones would hit ordinary text
    redact = Redactor(env={"DB_PASS": "pw1234", "API_TOKEN": "ab12"})
    assert redact("pw1234 ab12") == "[redacted:DB_PASS] ab12"


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "PWD",
        "OLDPWD",
        "HOME",
        "USER",
        "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES",
        "MAX_TOKENS",
        "TOKENIZERS_PARALLELISM",
        "XDG_SESSION_TYPE",
        "XDG_SESSION_DESKTOP",
        "DESKTOP_SESSION",
        "GIT_AUTHOR_NAME",
        "KEYMAP",
        "PIP_INDEX_URL",
        "TORCH_CUDA_ARCH_LIST",
        "HOSTNAME",
        "SHELL",
        "TERM",
    ],
)
def test_ordinary_names(name):
    assert not looks_secret_name(name)


def test_jailed_processes_get_an_allowlist_not_a_scrubbed_copy(monkeypatch):
    from cuda_agent.jail import minimal_env

    for k, v in {
        "GH_PAT": GHP,
        "DATABASE_URL": "postgres://a:b@h/d",
        "SENTRY_DSN": "https://k@s/1",
        "NPM_AUTH": "x",
        "SESSION_COOKIE": "c",
        "OPENAI_BASE_URL": "u",
        "HF_HOME": "h",
        "CUDA_VISIBLE_DEVICES": "0",
    }.items():
        monkeypatch.setenv(k, v)
    env = minimal_env()
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert not {
        "GH_PAT",
        "DATABASE_URL",
        "SENTRY_DSN",
        "NPM_AUTH",
        "SESSION_COOKIE",
        "OPENAI_BASE_URL",
        "HF_HOME",
    } & set(env)


# -- values ---------------------------------------------------------------------------------------


def test_secret_values_by_name_and_by_shape():
    env = {
        **ENV,
        "SOME_URL": "https://user:hunter22@example.com/x",
        "WHATEVER": "sk-ant-api03-" + "Q" * 30,
        "SHORT_TOKEN": "abc12",
        "CREDS_FILE_PASSWORD": "/etc/creds.json",
    }
    values = secret_values(env, extra=[("api_key", "configured-key-1")])
    assert set(values) == {
        "sk-test-123",
        GHP,
        "postgres://admin:pw@db/x",
        "https://user:hunter22@example.com/x",
        "sk-ant-api03-" + "Q" * 30,
        "configured-key-1",
    }
    assert values["sk-test-123"] == "OPENAI_API_KEY" and values["configured-key-1"] == "api_key"
    # under 6 characters, paths, and ordinary variables (ubuntu, 100000, /root) are not redacted everywhere
    assert not {"abc12", "/etc/creds.json", "ubuntu", "100000", "/root"} & set(values)


def test_short_key_is_redacted_everywhere_it_appears():
    redact = Redactor(env=ENV)
    text = "\n".join(["OPENAI_API_KEY=sk-test-123"] * 8 + ["key was sk-test-123."])
    out = redact(text)
    assert "sk-test-123" not in out and out.count("[redacted:OPENAI_API_KEY]") == 9


@pytest.mark.parametrize(
    "token",
    [
        "sk-" + "A1b2C3d4E5" * 5,  # OpenAI
        "sk-proj-" + "A1b2C3d4E5" * 4,
        "sk-ant-api03-" + "A1b2C3d4E5_-" * 4,  # Anthropic
        GHP,
        "gho_" + "Z9y8X7w6V5" * 4,
        "ghs_" + "Z9y8X7w6V5" * 4,
        "github_pat_11ABCDEFG0" + "abcdefghij_" * 5,
        "xoxb-1234567890-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx",
        "xoxp-12345-67890-abcdefghij",
        "AKIAIOSFODNN7EXAMPLE",
        "ASIAY34FZKBOKMUTVV7A",
        "hf_" + "AbCdEfGhIj" * 3 + "KlMn",
        "AIzaSyA-" + "1234567890abcdefghijklmnopqrstu",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
        "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    ],
)
def test_token_shapes_are_redacted_without_the_environment(token):
    assert looks_like_credential(token)
    out = Redactor(env={})(f"the value is {token}, see above")
    assert out == f"the value is {REDACTED}, see above"


def test_url_password_is_redacted_and_the_rest_kept():
    redact = Redactor(env={})
    assert (
        redact("connect to postgres://admin:s3cr3t@db.internal:5432/app now")
        == f"connect to postgres://admin:{REDACTED}@db.internal:5432/app now"
    )
    assert redact("redis://:pw123456@cache:6379/0") == f"redis://:{REDACTED}@cache:6379/0"
    assert (
        redact("https://github.com/org/repo.git and ssh://git@host:22/x")
        == "https://github.com/org/repo.git and ssh://git@host:22/x"
    )


def test_database_url_from_the_environment_goes_whole():
    redact = Redactor(env=ENV)
    assert redact("DATABASE_URL=postgres://admin:pw@db/x") == "DATABASE_URL=[redacted:DATABASE_URL]"
    # the same server with another path: the password is still caught by its shape
    assert redact("postgres://admin:pw@db/other") == f"postgres://admin:{REDACTED}@db/other"


def test_encoded_and_escaped_forms():
    secret = 'p@ss/w"rd\\with+space s'
    redact = Redactor(env={"DB_PASSWORD": secret})
    for form in (
        secret,
        quote(secret, safe=""),
        quote(secret),
        json.dumps(secret)[1:-1],
        json.dumps(json.dumps(secret)[1:-1])[1:-1],
    ):
        out = redact(f"<{form}>")
        assert out == "<[redacted:DB_PASSWORD]>", (form, out)
    # a JSON document that holds it (a tool printing a config), and its JSON text inside another
    doc = json.dumps({"db": {"password": secret}})
    assert secret not in redact(doc) and json.dumps(secret)[1:-1] not in redact(json.dumps({"stdout": doc}))


def test_longest_first_and_markers_are_not_matched_again():
    redact = Redactor(env={"A_TOKEN": "abcdef", "B_TOKEN": "abcdefghijkl", "C_SECRET": "redacted"})
    assert redact("abcdefghijkl abcdef") == "[redacted:B_TOKEN] [redacted:A_TOKEN]"
    assert redact(redact("abcdefghijkl")) == "[redacted:B_TOKEN]"  # exports redact again: stable


def test_env_style_assignments_and_auth_headers():
    redact = Redactor(env={})
    text = (
        "export MY_SERVICE_TOKEN=opaque-credential-42\nGH_PAT='shortpat99'\n"
        "Authorization: Bearer abcdefghijklmnop1234\ncurl -H 'Authorization: token qwertyuiop123'\n"
        'config = {"api_key": "zzzz-local-key", "password": "hunter2!"}'
    )
    out = redact(text)
    for secret in (
        "opaque-credential-42",
        "shortpat99",
        "abcdefghijklmnop1234",
        "qwertyuiop123",
        "zzzz-local-key",
        "hunter2!",
    ):
        assert secret not in out
    assert "export MY_SERVICE_TOKEN=[redacted]" in out and '"api_key": "[redacted]"' in out
    # names that are not credentials, and code that merely mentions a key, stay
    code = 'MAX_TOKENS=100000 BLOCK=256\nint key = threadIdx.x; cache_key = "conv_block"; author = "someone"'
    assert redact(code) == code


def test_credentials_in_a_url_query_and_kernel_code_that_looks_like_one():
    """A provider's error often quotes the request's URL: ?key=... (Google), &access_token=...,
    a presigned URL's signature. Kernel code with `&&key==` or a ternary is not a URL."""
    redact = Redactor(env={})
    url = (
        "GET https://gen.example/v1/models?key=plainvalue123&alt=json failed; "
        "https://s3.example/o?X-Amz-Signature=abcdef0123456789&X-Amz-Expires=60 "
        "wss://h/stream?access_token=opaque.tok.en42"
    )
    out = redact(url)
    for secret in ("plainvalue123", "abcdef0123456789", "opaque.tok.en42"):
        assert secret not in out
    assert "?key=[redacted]&alt=json" in out and "X-Amz-Expires=60" in out
    code = "if (i < n && idx&&key==target) out[i] = flag?key=1:0; bool ok = a&key_mask==0;"
    assert redact(code) == code


def test_nested_records():
    redact = Redactor(env=ENV, extra=[("api_key", "configured-key-1")])
    record = {
        "type": "tool_result",
        "step": 3,
        "seconds": 0.5,
        "ok": True,
        "none": None,
        "observation": "GH_PAT=" + GHP,
        "data": {"stdout": ["line sk-test-123", ("configured-key-1", 7)], "nested": {"url": ENV["DATABASE_URL"]}},
    }
    out = redact(record)
    assert out["step"] == 3 and out["seconds"] == 0.5 and out["ok"] is True and out["none"] is None
    assert out["observation"] == "GH_PAT=[redacted:GH_PAT]"
    assert out["data"] == {
        "stdout": ["line [redacted:OPENAI_API_KEY]", ("[redacted:api_key]", 7)],
        "nested": {"url": "[redacted:DATABASE_URL]"},
    }
    assert record["observation"].endswith(GHP)  # the input is not changed


def test_add_registers_more_values():
    redact = Redactor(env={})
    assert redact("local-key-xyz") == "local-key-xyz"
    redact.add(("api_key", "local-key-xyz"), "another-one-1", "short")
    assert redact("local-key-xyz another-one-1 short") == "[redacted:api_key] [redacted] short"


def test_configured_secrets(monkeypatch):
    monkeypatch.setenv("MY_LLM_SERVER", "vllm-local-key-9")  # a variable whose name says nothing

    class Config(BaseModel):
        model: str = "openai/gpt-x"
        api_key: str = "from-a-config-file-1"
        api_key_env: str = "MY_LLM_SERVER"
        api_base: str = "http://localhost:8000/v1"
        max_tokens: int = 512

    class Model(ScriptedModel):
        def secret_values(self):
            return [("own_key", "from-the-model-itself"), ("empty", "")]

    found = {
        (n, v) for n, v in configured_secrets(Model([], settings=Config().model_dump())) if not n.startswith("litellm.")
    }
    assert found == {
        ("api_key", "from-a-config-file-1"),
        ("MY_LLM_SERVER", "vllm-local-key-9"),
        ("own_key", "from-the-model-itself"),
    }
    # a model with no settings has nothing of its own to report
    assert [n for n, _ in configured_secrets(ScriptedModel([])) if not n.startswith("litellm.")] == []

    class Broken(ScriptedModel):
        def secret_values(self):
            raise RuntimeError("its key store is down")

    assert configured_secrets(Broken([], settings={"api_key": "still-found-1"}))[:1] == [("api_key", "still-found-1")]


def test_litellm_module_keys_are_configured_secrets(monkeypatch):
    import sys

    monkeypatch.setitem(
        sys.modules,
        "litellm",
        SimpleNamespace(api_key="set-in-litellm-1", openai_key=None, anthropic_key="ant-module-key", model_cost={}),
    )
    assert set(configured_secrets(ScriptedModel([]))) == {
        ("litellm.api_key", "set-in-litellm-1"),
        ("litellm.anthropic_key", "ant-module-key"),
    }


def test_scrub_config_drops_credentials_and_keeps_limits():
    config = {
        "model": {
            "model": "gpt-x",
            "api_key": "abc123",
            "api_key_env": "OPENAI_API_KEY",
            "max_tokens": 512,
            "api_base": "http://localhost:8000/v1",
            "extra_headers": [GHP, "x-ok"],
            "db": "postgres://u:p4ssword@h/d",
        },
        "agent": {"max_tokens": 1000, "max_cost": None, "session_timeout": 30},
    }
    assert scrub_config(config) == {
        "model": {
            "model": "gpt-x",
            "max_tokens": 512,
            "api_base": "http://localhost:8000/v1",
            "extra_headers": ["x-ok"],
        },
        "agent": {"max_tokens": 1000, "max_cost": None, "session_timeout": 30},
    }


# -- ordinary output survives -----------------------------------------------------------------------

COMPILE_ERROR = """compile failed:
/tmp/cuda-agent-cache/build/3f9a1c0e7b2d/kernels/scale_add.cu(12): error: identifier "j" is undefined
      y[j] = alpha * x[i] + beta;
        ^
/tmp/cuda-agent-cache/build/3f9a1c0e7b2d/kernels/scale_add.cu(27): warning #177-D: variable "tmp" was declared \
but never referenced
1 error detected in the compilation of "kernels/scale_add.cu".
ptxas info    : Compiling entry function '_Z15scale_add_kernelPKfS0_Pfif' for 'sm_90a'
ptxas info    : Used 24 registers, 380 bytes cmem[0], 0 bytes spill stores, 0 bytes spill loads
CUDA error: an illegal memory access was encountered at 0x7f3a2b00c000 (device pointer 0x00007ffd5e3c9a10)
RuntimeError: shape mismatch: expected torch.Size([4096, 4096]) (float32, cuda:0), got (4096, 2048)
  File "/root/runs/run-20240101-abcdef/workspace/model_new.py", line 42, in forward
    return torch.ops.cuda_agent.scale_add(x, y, 0.5, 1e-5)
make: *** [Makefile:12: build/scale_add.o] Error 1
sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  commit 4f2a9c81d3e5b7a0c9e8f7d6b5a4c3d2e1f0a9b8
fix the first error, then compile again"""

VERDICT = """status: correct (reward 3)
input sets: 5/5 correct
worst error vs float64 truth: max abs 1.192e-07, normwise rel 3.41e-08 (fp32 reference's own: 2.98e-08)
time: 0.0412 ms (p10 0.0409, p90 0.0420, 200 reps)
eager: 0.1320 ms; torch.compile: 0.0871 ms
speedup: 3.20x vs eager, 2.11x vs torch.compile
warning shape_guard (model_new.py:17): input (8192, 4096) float16 is not contiguous: .contiguous() copies it
note: seeds 1234567, 7654321; device NVIDIA H200 (sm_90), driver 550.54.15, CUDA 12.4
version 7 committed (4f2a9c81); best so far: version 7 (reward 3, 0.0412 ms)"""


def _ordinary_texts() -> list[str]:
    from cuda_agent.profiling.ncu import parse_ncu_csv
    from cuda_agent.tools.profile_tool import kernels_text

    fixtures = Path(__file__).parent / "profiling" / "fixtures"
    texts = [COMPILE_ERROR, VERDICT]
    for csv in sorted(fixtures.glob("ncu-*.csv")):
        raw = csv.read_text()
        texts += [raw, kernels_text(parse_ncu_csv(raw), 12.0)]
    return texts


def test_ordinary_output_comes_through_unchanged(monkeypatch):
    texts = _ordinary_texts()
    assert len(texts) >= 4
    redact = Redactor(env=ENV, extra=[("api_key", "configured-key-1")])
    for text in texts:
        assert redact(text) == text
    # and with this machine's own environment plus the test's secrets
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    everyday = Redactor()
    for text in texts:
        assert everyday(text) == text


# -- the tools redact before bounding -----------------------------------------------------------------


def test_tools_redact_before_bounding_and_in_their_errors():
    from cuda_agent.tools.base import MAX_OBSERVATION, Tool, ToolContext, ToolResult
    from cuda_agent.tools.registry import dispatch

    key = "sk-proj-" + "Z" * 40

    class Noisy(BaseModel):
        crash: bool = False

    class Dump(Tool):
        name, description, Args = "dump", "prints a lot", Noisy

        def execute(self, args, ctx):
            if args.crash:
                raise RuntimeError(f"connection failed for {key}")
            cut = MAX_OBSERVATION * 2 // 3 - 20  # the key straddles where bound() cuts
            return ToolResult(observation="x" * cut + key + "y" * 10_000)

    ctx = ToolContext(workspace=None, redact=Redactor(env={"OPENAI_API_KEY": key}).text)
    out = dispatch([Dump()], "dump", {}, ctx).observation
    assert len(out) <= MAX_OBSERVATION + 100 and "ZZZZ" not in out and "sk-proj" not in out
    crashed = dispatch([Dump()], "dump", {"crash": True}, ctx)
    assert (
        crashed.status == "error"
        and key not in crashed.observation
        and "[redacted:OPENAI_API_KEY]" in crashed.observation
    )
