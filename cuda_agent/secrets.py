"""Credentials never reach the model or a record: what looks like one, and how it is redacted.

Two exits pass through a `Redactor`: every tool observation (and every other text the loop sends
the model) before it joins the history, and every record before it is written to trajectory.jsonl
(exports redact again on the way out). Redaction is by value first, then by shape:

- By value: every value of the environment whose variable *name* looks like a credential
  (`looks_secret_name`) or whose *value* has a credential's shape (`looks_like_credential`), when
  it is 6 characters or longer and not a file path, plus the configured keys the caller adds (the
  model's api_key, the variable its api_key_env names, litellm's module-level keys), also found
  URL-encoded and JSON-escaped, longest first; each becomes `[redacted:NAME]` or `[redacted]`.
- By shape, anywhere, even when the value is in no variable: provider tokens, the password of a
  `scheme://user:password@host` URL, a URL's credential-named query parameter (`?key=...`),
  `Authorization:`/`Bearer` values, the value of an env-style `SECRET_NAME=value` assignment and
  of a quoted `"api_key": "..."` setting (a strong name only: `cache_key = "conv"` stays).
  Ordinary output (kernel names, hex addresses, shapes, paths, numbers, tables) has none of these.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from typing import Any, Iterable, Mapping, Protocol
from urllib.parse import quote, quote_plus

REDACTED = "[redacted]"
MIN_LENGTH = 6  # shorter values are too common in ordinary text to replace everywhere


# a name's parts (split at non-alphanumerics and camelCase) that make it a credential's name
_SECRET_PARTS = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWORDS",
        "PASSWD",
        "PASS",
        "PW",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "CRED",
        "CREDS",
        "AUTH",
        "AUTHORIZATION",
        "OAUTH",
        "COOKIE",
        "COOKIES",
        "SESSION",
        "SESSIONID",
        "DSN",
        "PAT",
        "JWT",
        "BEARER",
        "WEBHOOK",
    }
)
# parts too common in ordinary code to redact a quoted lowercase setting for (`cache_key = "conv"`)
_WEAK_PARTS = frozenset({"KEY", "KEYS", "SESSION", "SESSIONID", "PASS", "PW", "PAT"})
# a part ending in one of these is one too (APIKEY, ACCESSKEY, GHTOKEN, DBPASSWORD), and one
# holding one of the unambiguous words anywhere (SECRETVALUE, PASSWORDFILE, MYAPIKEYX)
_SECRET_SUFFIXES = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "COOKIE", "CREDENTIALS")
_SECRET_INFIXES = ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "APIKEY", "ACCESSKEY", "PRIVATEKEY", "AUTHTOKEN")
# a URL/URI/connection string of a database or broker carries its password
_DB_PARTS = frozenset(
    {
        "DATABASE",
        "DB",
        "POSTGRES",
        "POSTGRESQL",
        "PG",
        "MYSQL",
        "MARIADB",
        "MONGO",
        "MONGODB",
        "REDIS",
        "AMQP",
        "RABBITMQ",
        "BROKER",
        "SQL",
        "SQLALCHEMY",
        "CELERY",
        "ELASTICSEARCH",
        "CLICKHOUSE",
    }
)
_LOCATOR_PARTS = frozenset({"URL", "URI", "URLS", "CONN", "CONNSTR", "CONNECTION"})
# desktop-session variables: a session's kind, not a credential ("ubuntu", "wayland")
_NOT_SECRET = re.compile(r"^(XDG_SESSION_\w*|DESKTOP_SESSION|GDMSESSION)$", re.IGNORECASE)


def _parts(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)  # apiKey -> api_Key
    return [p for p in re.split(r"[^A-Za-z0-9]+", spaced.upper()) if p]


def _secret_parts(name: str) -> list[str]:
    """The parts of `name` that make it a credential's name (empty: not one)."""
    if _NOT_SECRET.match(name):
        return []
    parts = _parts(name)
    found = [
        p for p in parts if p in _SECRET_PARTS or p.endswith(_SECRET_SUFFIXES) or any(w in p for w in _SECRET_INFIXES)
    ]
    if "CONNECTION" in parts and "STRING" in parts:
        found.append("CONNECTION_STRING")
    if _DB_PARTS.intersection(parts) and _LOCATOR_PARTS.intersection(parts):
        found.append("DATABASE_URL")
    return found


def looks_secret_name(name: str) -> bool:
    """Whether a variable (or setting) of this name may carry a credential, case-insensitively:
    GH_PAT, DATABASE_URL, SENTRY_DSN, NPM_AUTH, DB_PASSWD, SESSION_COOKIE, apiKey... but not PATH,
    PWD, MAX_TOKENS, TOKENIZERS_PARALLELISM or XDG_SESSION_TYPE."""
    return bool(_secret_parts(name))


def _strong_secret_name(name: str) -> bool:
    """A credential's name even in code (api_key, password, auth_token), not just `key`."""
    found = _secret_parts(name)
    return any(p not in _WEAK_PARTS for p in found) or bool(found and {"API", "ACCESS", "SECRET"} & set(_parts(name)))


# provider tokens: OpenAI/Anthropic/DeepSeek (sk-), GitHub, Slack, AWS key ids, Hugging Face,
# Google API keys, JWTs (header.payload.signature, base64url of '{"...')
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:"
    r"sk-[A-Za-z0-9_\-]{8,}"
    r"|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abposre]-[A-Za-z0-9\-]{8,}|xapp-[A-Za-z0-9\-]{8,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|hf_[A-Za-z0-9]{20,}"
    r"|AIza[0-9A-Za-z_\-]{30,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"
    r")(?![A-Za-z0-9_\-])"
)
# the password of scheme://user:password@host (the user and host stay)
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@'\"<>\ue000]*:)([^\s@/'\"<>\ue000]+)(@)")
_AUTH_HEADER = re.compile(r"(?i)\b(authorization\s*[:=]\s*(?:bearer|basic|token|bot)?\s*)([^\s'\",;]{6,})")
_BEARER = re.compile(r"\b(Bearer\s+)([A-Za-z0-9._~+/\-]{12,}=*)")
# a URL's query parameter named like a credential (?key=..., &access_token=..., X-Amz-Signature=...);
# not `a&&key==b` in kernel code (a doubled & or =)
_URL_QUERY = re.compile(
    r"(?i)(?<!&)([?&][a-z0-9_.\-]*(?:key|token|secret|signature|sig|password)=)"
    r"([^=&\s#'\"<>][^&\s#'\"<>]{5,})"
)
# an env-style assignment (`export GH_PAT=...`, `DATABASE_URL="..."`, `api_key: "..."`) whose name
# looks like a credential's; the name stays. Lowercase names only with a quoted value or a colon
# after a strong word, so kernel code such as `int key=threadIdx.x;` is left alone.
_ASSIGNMENT = re.compile(r"\b([A-Z][A-Z0-9_]*)=(\"[^\"\n]*\"|'[^'\n]*'|[^\s'\"]+)")
_QUOTED_SETTING = re.compile(r"([\"']?)\b([A-Za-z][A-Za-z0-9_\-]*)\1(\s*[:=]\s*)([\"'])([^\"'\n]{6,})\4")


def looks_like_credential(value: str) -> bool:
    """Whether a whole value has a credential's shape (a provider token, a URL with a password)."""
    v = value.strip()
    return bool(_TOKEN_SHAPES.fullmatch(v) or _URL_PASSWORD.search(v))


def _worth_redacting(value: str) -> bool:
    """Long enough, and not a file path (HF_HOME, GOOGLE_APPLICATION_CREDENTIALS name where a
    credential is; replacing a path would mangle every path under it)."""
    v = value.strip()
    if len(v) < MIN_LENGTH or v.startswith(REDACTED[:-1]):
        return False
    return not (v.startswith(("/", "~/", "./")) and not any(c.isspace() for c in v))


def secret_values(env: Mapping[str, str] | None = None, extra: Iterable[Any] = ()) -> dict[str, str | None]:
    """The values to redact, each with the name its marker shows (None: a plain `[redacted]`):
    the environment's credential-named or credential-shaped variables, and `extra` (plain values,
    or (name, value) pairs), 6 characters or longer and not a file path."""
    env = os.environ if env is None else env
    pairs = [item if isinstance(item, tuple) else (None, item) for item in extra]
    pairs += [
        (name, value)
        for name, value in sorted(env.items())
        if isinstance(value, str) and (looks_secret_name(name) or looks_like_credential(value))
    ]
    found: dict[str, str | None] = {}
    for name, value in pairs:
        if isinstance(value, str) and _worth_redacting(value):
            found.setdefault(value, name)
            found.setdefault(value.strip(), name)
    return found


def _variants(value: str) -> set[str]:
    """How a value may appear in text: as is, URL-encoded, JSON-escaped (once or twice)."""
    escaped = json.dumps(value)[1:-1]
    out = {
        value,
        quote(value, safe=""),
        quote(value),
        quote_plus(value),
        escaped,
        json.dumps(value, ensure_ascii=False)[1:-1],
        json.dumps(escaped)[1:-1],
    }
    return {v for v in out if len(v) >= MIN_LENGTH}


class KeyHolder(Protocol):
    """What configured_secrets reads of a model: the part of agent/interfaces.py's Model it needs,
    declared here so that this low module imports nothing of the agent's."""

    def client_config(self) -> dict[str, Any]: ...

    def secret_values(self) -> list[tuple[str, str]]: ...


def configured_secrets(model: KeyHolder) -> list[tuple[str, str]]:
    """The keys a model was configured with: credential-named string settings of its
    client_config(), the variables its `*_env` settings name (api_key_env), what its
    secret_values() reports, and litellm's module-level keys when litellm is loaded."""
    found: list[tuple[str, str]] = []
    for key, value in model.client_config().items():
        if not isinstance(value, str) or not value:
            continue
        if str(key).lower().endswith("_env"):  # names a variable: its value is the secret
            if os.environ.get(value):
                found.append((value, os.environ[value]))
        elif looks_secret_name(str(key)):
            found.append((str(key), value))
    with contextlib.suppress(Exception):  # reporting its keys must not end a run
        found += [(name, value) for name, value in model.secret_values() if value]
    litellm = sys.modules.get("litellm")
    for attr in dir(litellm) if litellm is not None else ():
        value = getattr(litellm, attr, None) if attr == "api_key" or attr.endswith("_key") else None
        if isinstance(value, str) and value:
            found.append((f"litellm.{attr}", value))
    return found


_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use characters around a placeholder's index
_PLACEHOLDER = re.compile(f"{_OPEN}(\\d+){_CLOSE}")
_MARKER = re.compile(r"\[redacted(?::[^\]\s]{1,100})?\]")


class Redactor:
    """Replaces credentials in every string of a JSON-like object (dict keys stay): the values of
    `secret_values(env, extra)` in all their forms (_variants), longest first, then credential-shaped
    text. `env` (default: os.environ) is read again whenever it changed; a value once seen stays
    redacted after its variable is gone. `add` registers more (the model's configured key)."""

    def __init__(self, env: Mapping[str, str] | None = None, extra: Iterable[Any] = ()):
        self._env = env
        self._values: dict[str, str | None] = {}
        self._table: list[tuple[str, str]] = []
        self._seen: tuple | None = None
        self._add(secret_values({}, extra))
        self._refresh()

    def add(self, *values: Any) -> None:
        """More values to redact: plain strings or (name, value) pairs (a configured key)."""
        self._add(secret_values({}, values))

    def _refresh(self) -> None:
        env = os.environ if self._env is None else self._env
        snapshot = tuple(env.items())
        if snapshot != self._seen:
            self._seen = snapshot
            self._add(secret_values(dict(snapshot)))

    def _add(self, found: dict[str, str | None]) -> None:
        new = {v: n for v, n in found.items() if v not in self._values}
        if not new:
            return
        self._values.update(new)
        table = dict(self._table)
        for value, name in self._values.items():
            for form in _variants(value):
                table.setdefault(form, f"[redacted:{name}]" if name else REDACTED)
        self._table = sorted(table.items(), key=lambda kv: (-len(kv[0]), kv[0]))

    def __call__(self, obj: Any) -> Any:
        self._refresh()
        return self._redact(obj)

    def _redact(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return self._text(obj)
        if isinstance(obj, dict):
            return {k: self._redact(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self._redact(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self._redact(v) for v in obj)
        return obj

    def text(self, s: str) -> str:
        return self(s)

    def _text(self, s: str) -> str:
        if not s:
            return s
        # values longest first, through placeholders so a shorter value never matches inside a marker
        # (nor inside one a previous pass wrote: exports redact records that were redacted already)
        markers: list[str] = []

        def hold(mark: str) -> str:
            markers.append(mark)
            return f"{_OPEN}{len(markers) - 1}{_CLOSE}"

        if REDACTED[:-1] in s:
            s = _MARKER.sub(lambda m: hold(m.group(0)), s)
        for form, mark in self._table:
            if form in s:
                s = s.replace(form, hold(mark))
        s = redact_shapes(s)
        if markers:
            s = _PLACEHOLDER.sub(
                lambda m: markers[int(m.group(1))] if int(m.group(1)) < len(markers) else m.group(0), s
            )
        return s


def redact_shapes(s: str) -> str:
    """Credential-shaped text replaced, whatever variable (if any) it came from."""
    s = _TOKEN_SHAPES.sub(REDACTED, s)
    s = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(3), s)
    s = _AUTH_HEADER.sub(lambda m: m.group(1) + REDACTED, s)
    s = _BEARER.sub(lambda m: m.group(1) + REDACTED, s)
    s = _URL_QUERY.sub(lambda m: m.group(1) + REDACTED, s)
    s = _ASSIGNMENT.sub(_assignment, s)
    return _QUOTED_SETTING.sub(_quoted_setting, s)


def _assignment(m: re.Match) -> str:
    name, value = m.group(1), m.group(2)
    if not looks_secret_name(name) or _kept(value.strip("\"'")):
        return m.group(0)
    quote_char = value[0] if value[:1] in "\"'" and len(value) > 1 else ""
    return f"{name}={quote_char}{REDACTED}{quote_char}"


def _kept(value: str) -> bool:
    """Too short, a path, or already a marker or a placeholder: left as it is."""
    return not _worth_redacting(value) or _OPEN in value or REDACTED[:-1] in value


def _quoted_setting(m: re.Match) -> str:
    if not _strong_secret_name(m.group(2)) or _kept(m.group(5)):
        return m.group(0)
    return f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{m.group(4)}{REDACTED}{m.group(4)}"


def scrub_config(config: Any) -> Any:
    """A config with credentials removed (not just masked): string values under credential-named
    keys, credential-shaped values. Numbers under such names (max_tokens) are limits: kept."""
    if isinstance(config, dict):
        return {
            k: scrub_config(v)
            for k, v in config.items()
            if not (looks_secret_name(str(k)) and isinstance(v, str) and v) and not _key_shaped(v)
        }
    if isinstance(config, (list, tuple)):
        return [scrub_config(v) for v in config if not _key_shaped(v)]
    return config


def _key_shaped(v: Any) -> bool:
    return isinstance(v, str) and redact_shapes(v) != v
