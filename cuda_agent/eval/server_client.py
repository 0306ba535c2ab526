"""`cuda-agent eval`'s side of the warm server (server.py): find it, start it, check who it is, ask it.

Any failure here is an answer of None: the command then evaluates in its own process, as it does
with eval.server_idle_s = 0, and says why in one line on stderr. No verdict is ever lost to the
server, and none is taken from a process that is not the server this user started: whoever answers
at the address shows it first (server_identity.py), and its answer must have the shape of one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from pydantic import ValidationError

from cuda_agent.eval.server_address import address, peer_credentials
from cuda_agent.eval.server_identity import HELLO_TIMEOUT_S, IdentityError, open_records, records_dir, server_problem
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.verdict import Verdict

START_WAIT_S = 30.0  # the server binds its address before it imports anything heavy
MAX_ANSWER = 64 << 20  # a verdict is a few kB; past this it is no server's answer


def log_path(cfg: EvalConfig) -> Path:
    return cfg.cache_root() / "eval-server.log"


def evaluate(
    cfg: EvalConfig, request: dict, say: Callable[[str], None], before_start: Callable[[], None]
) -> dict | None:
    """The answer of the server for the request's task ({"verdict", "task", "name", "server"} or
    {"usage": line}), started when none answers (`before_start` first), or None: evaluate here."""
    records = records_dir(cfg.cache_root())
    try:
        os.close(open_records(records, create=True))
    except IdentityError as e:
        say(f"{e}; evaluating in this process")
        return None
    name = address(cfg.device, request["task"], request["inputs"], records)
    try:
        for _ in range(2):
            sock = connect(name)
            if sock is None:
                before_start()
                sock = start(name, records, cfg, say)
            if sock is None:
                return None
            answer = ask(sock, name, records, request, say, log_path(cfg))
            if answer is None or "restart" not in answer:
                return answer
            say(f"the eval server stopped: {answer['restart']}; starting another")
    except TimeoutError:
        say(
            f"the eval server's address is held by a process that takes no connection (none within "
            f"{HELLO_TIMEOUT_S:g} s); evaluating in this process"
        )
    return None


def connect(name: str) -> socket.socket | None:
    """A connection to whoever listens at `name` (address()), or None: no one. TimeoutError: a
    listener that never accepts (its backlog is full)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(HELLO_TIMEOUT_S)
    try:
        sock.connect(name)
    except TimeoutError:
        sock.close()
        raise
    except OSError:
        sock.close()
        return None
    sock.settimeout(None)
    return sock


def start(name: str, records: Path, cfg: EvalConfig, say: Callable[[str], None]) -> socket.socket | None:
    """Start a server in a session of its own (a Ctrl-C of this terminal does not stop it) and connect."""
    log = log_path(cfg)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cuda_agent.eval.server",
                "--address",
                name[1:],
                "--records",
                str(records),
                "--idle",
                f"{cfg.server_idle_s:g}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            cwd="/",
        )
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        sock = connect(name)
        if sock is not None:  # whoever it is (another client's server, a squatter), ask() checks it
            if peer_credentials(sock)[0] == proc.pid:
                say(
                    f"eval server started (pid {proc.pid}, {cfg.device}): the next `cuda-agent eval` of this task "
                    f"skips the start-up; it stops after {cfg.server_idle_s:g} s idle (kill {proc.pid} to stop it "
                    f"now; --no-server or eval.server_idle_s = 0 to evaluate in-process; log {log})"
                )
            return sock
        if proc.poll() is not None and connect(name) is None:
            break
        time.sleep(0.05)
    say(f"the eval server did not start (see {log}); evaluating in this process")
    return None


def ask(
    sock: socket.socket, name: str, records: Path, request: dict, say: Callable[[str], None], log: Path
) -> dict | None:
    """The server's answer to `request` (closes `sock`), or None: evaluate here. Nothing is sent
    before the peer showed that it is the server this user started at `name`."""
    with sock, sock.makefile("rb") as reader:
        why = server_problem(sock, reader, records, name)
        if why:
            say(
                f"the process at the eval server's address is not the server this user started: {why}; "
                "evaluating in this process"
            )
            return None
        try:  # no deadline: the server answers when the evaluation (its own timeouts) and those queued before end
            sock.sendall(json.dumps(request).encode() + b"\n")
            line = reader.readline(MAX_ANSWER)
        except OSError as e:
            line, why = b"", e.strerror
        else:
            why = "it closed the connection"
    if not line:
        say(f"the eval server ended without an answer ({why}; see {log}); evaluating in this process")
        return None
    answer, why = parse_answer(line)
    if answer is None:
        say(f"the eval server's answer is malformed ({why}; see {log}); evaluating in this process")
        return None
    if "refused" in answer:
        say(f"the eval server refused this request ({answer['refused']}); evaluating in this process")
        return None
    return answer


def parse_answer(line: bytes) -> tuple[dict | None, str]:
    """The answer in `line` if it has the shape server.Warm.handle gives one, else (None, why not)."""
    if not line.endswith(b"\n"):
        return None, f"it ended after {len(line)} bytes, mid-line"
    try:
        answer = json.loads(line)
    except ValueError:
        return None, "not JSON"
    if not isinstance(answer, dict):
        return None, "not a JSON object"
    for key in ("refused", "restart", "usage"):
        if key in answer:
            return (answer, "") if isinstance(answer[key], str) else (None, f"its {key!r} is not a line of text")
    try:
        Verdict.model_validate(answer.get("verdict"))
    except ValidationError as e:
        first = e.errors()[0]
        return None, f"its verdict does not validate: {'.'.join(map(str, first['loc'])) or 'verdict'}: {first['msg']}"
    for key, kind in (("task", dict), ("name", str), ("server", dict)):
        if not isinstance(answer.get(key), kind):
            return None, f"its {key!r} is not a {kind.__name__}"
    return answer, ""
