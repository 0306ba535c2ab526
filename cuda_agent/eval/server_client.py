"""`cuda-agent eval`'s side of the warm server (server.py): find it, start it, ask it.

Any failure here is an answer of None: the command then evaluates in its own process, as it does
with eval.server_idle_s = 0, and says why on stderr. No verdict is ever lost to the server.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from cuda_agent.eval.server_address import address
from cuda_agent.eval.settings import EvalConfig

START_WAIT_S = 30.0  # the server binds its address before it imports anything heavy


def log_path(cfg: EvalConfig) -> Path:
    return cfg.cache_root() / "eval-server.log"


def evaluate(cfg: EvalConfig, request: dict, say: Callable[[str], None], before_start: Callable[[], None]) -> dict | None:
    """The answer of the server for the request's task ({"verdict", "task", "name", "server"} or
    {"usage": line}), started when none answers (`before_start` first), or None: evaluate here."""
    name = address(cfg.device, request["task"], request["inputs"])
    for _ in range(2):
        sock = connect(name)
        if sock is None:
            before_start()
            sock = start(name, cfg, say)
        if sock is None:
            return None
        answer = ask(sock, request, say, log_path(cfg))
        if answer is None or "restart" not in answer:
            return answer
        say(f"the eval server stopped: {answer['restart']}; starting another")
    return None


def connect(name: str) -> socket.socket | None:
    """A connection to the server at `name` (address()), or None."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(name)
    except OSError:
        sock.close()
        return None
    return sock


def start(name: str, cfg: EvalConfig, say: Callable[[str], None]) -> socket.socket | None:
    """Start a server in a session of its own (a Ctrl-C of this terminal does not stop it) and connect."""
    log = log_path(cfg)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cuda_agent.eval.server", "--address", name[1:],
                                 "--idle", f"{cfg.server_idle_s:g}"],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, cwd="/")
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        sock = connect(name)
        if sock is not None:
            say(f"eval server started (pid {proc.pid}, {cfg.device}): the next `cuda-agent eval` of this task skips "
                f"the start-up; it stops after {cfg.server_idle_s:g} s idle (kill {proc.pid} to stop it now; "
                f"--no-server or eval.server_idle_s = 0 to evaluate in-process; log {log})")
            return sock
        if proc.poll() is not None and connect(name) is None:
            break
        time.sleep(0.05)
    say(f"the eval server did not start (see {log}); evaluating in this process")
    return None


def ask(sock: socket.socket, request: dict, say: Callable[[str], None], log: Path) -> dict | None:
    """The server's answer to `request` (closes `sock`), or None: evaluate here."""
    try:
        with sock:
            sock.sendall(json.dumps(request).encode() + b"\n")
            line = sock.makefile("rb").readline()
    except OSError as e:
        line, why = b"", e.strerror
    else:
        why = "it closed the connection"
    if not line:
        say(f"the eval server ended without an answer ({why}; see {log}); evaluating in this process")
        return None
    try:
        answer = json.loads(line)
    except ValueError:
        answer = {"refused": "its answer is not JSON"}
    if "refused" in answer:
        say(f"the eval server refused this request ({answer['refused']}); evaluating in this process")
        return None
    return answer
