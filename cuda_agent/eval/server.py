"""`cuda-agent eval`'s warm server: the parent of its evaluations, kept alive between them.

A new `cuda-agent eval` spends most of its time before the evaluation starts: python, the torch
import, the CUDA context, the task's reference and determinism check, and the jailed recorder's
and judge's own start-up. This process does that once per task and settings and answers each
`eval` with the same Evaluator the command would have made (cli_eval.py). Nothing changes for
the candidate: each evaluation still takes a recorder and a judge that never ran anything else,
and the next pair starts after the answer went out, while the user edits (not during a timing).

One task per server (its module runs here: what it sets at import must not reach another task's
reference), one request at a time, in the order they come (one evaluation at a time on the
device). It exits after `--idle` seconds without one, or when its task file was edited. Each client
first has it prove that it is the server this user started (server_identity.py). Started by
server_client.start: `python -m cuda_agent.eval.server --address NAME --records DIR --idle S`, its
stderr to a log.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from cuda_agent.eval.server_address import peer_problem
from cuda_agent.eval.server_identity import HELLO_TIMEOUT_S, MAX_HELLO, IdentityError, proof, publish, withdraw

MAX_REQUEST = 1 << 20


class Warm:
    """One task's Evaluator, made again when the settings change. The task's module runs in this
    process (the reference), so a server serves one task, as it was when first loaded: an edited
    task file is answered with "restart" (a new process, as a new `eval` would be)."""

    def __init__(self) -> None:
        self.task: tuple[str, str | None, dict] | None = None  # (task ref, inputs, the files' bytes)
        self.key: str | None = None
        self.name = ""  # the task's, for the verdict table's title
        self.ev = None
        self.evaluations = 0  # by the current evaluator

    def handle(self, req: dict) -> dict:
        from cuda_agent.eval.evaluator import Evaluator
        from cuda_agent.eval.settings import EvalConfig
        from cuda_agent.eval.verdict import harness_error
        from cuda_agent.task import TaskError, load_task

        task = (req["task"], req.get("inputs"), task_files(req["task"], req.get("inputs")))
        if self.task is not None and task != self.task:
            return {"restart": "the task changed since this server loaded it"}
        cfg = EvalConfig.model_validate(req["cfg"])
        key = cfg.model_dump_json(exclude={"server_idle_s"})
        reused = key == self.key and self.ev is not None
        try:
            if not reused:
                self.drop()
                try:
                    loaded = load_task(req["task"], inputs=Path(req["inputs"]) if req.get("inputs") else None)
                except TaskError as e:
                    return {"usage": str(e)}
                self.task, self.name = task, loaded.name  # the evaluator's own copy has a temporary name
                self.ev, self.key, self.evaluations = Evaluator(loaded, cfg, ahead="first"), key, 0
            verdict = self.ev.evaluate(Path(req["candidate"]))
            info = self.ev.describe_task()
        except Exception as e:  # as the command's own: a verdict, never a traceback
            verdict, info = harness_error(e), {"path": req["task"]}
            self.drop()
        self.evaluations += 1
        answer = {
            "verdict": verdict.model_dump(mode="json"),
            "task": info,
            "name": self.name or Path(req["task"].partition("::")[0]).stem,
            "server": {"pid": os.getpid(), "evaluations": self.evaluations, "reused": reused},
        }
        if verdict.status in ("unscorable", "error"):  # maybe passing (memory, a flaky task): start afresh next time
            self.drop()
        return answer

    def after(self) -> None:
        """Between requests: the next recorder and judge start now, ready by the next edit."""
        if self.ev is not None:
            self.ev.spares.top_up()

    def drop(self) -> None:
        if self.ev is not None:
            self.ev.close()
        self.ev, self.key = None, None


def task_files(ref: str, inputs: str | None) -> dict[str, bytes | None]:
    """The bytes of the files a task is loaded from (itself, its inputs file or sidecar), unrun."""
    from cuda_agent.task import sidecar_path

    path = Path(ref.partition("::")[0])
    files = {}
    for f in (path, Path(inputs) if inputs else sidecar_path(path)):
        try:
            files[str(f)] = f.read_bytes()
        except OSError:
            files[str(f)] = None
    return files


def serve(sock: socket.socket, idle_s: float, name: str, token: str, records: Path) -> None:
    """Answer evaluations one at a time, in the order they came; a thread of its own greets each
    client at once, even during an evaluation (the client's identity check has a short deadline)."""
    warm = Warm()
    greeted: queue.Queue = queue.Queue()  # (connection, its reader): identity shown, request not yet read
    closing = threading.Event()
    greeter = threading.Thread(target=greet, args=(sock, name, token, greeted, closing), daemon=True)
    greeter.start()

    def close() -> None:  # frees the address (the client may start the next server at once), its record first
        closing.set()
        greeter.join()
        withdraw(records, name, os.getpid())
        sock.close()

    try:
        while True:
            try:
                conn, reader = greeted.get(timeout=idle_s if idle_s > 0 else None)
            except queue.Empty:
                log(f"idle for {idle_s:g} s: exiting")
                return
            with conn, reader:
                try:
                    conn.settimeout(HELLO_TIMEOUT_S)  # a client sends its request as soon as it has the proof
                    line = reader.readline(MAX_REQUEST)
                except OSError:
                    line = b""
                if not line:  # it went away (the check failed on its side, or Ctrl-C)
                    continue
                conn.settimeout(None)
                try:
                    req = json.loads(line)
                    answer = (
                        warm.handle(req) if req.get("op") == "evaluate" else {"usage": f"unknown op {req.get('op')!r}"}
                    )
                except (ValueError, KeyError, TypeError, AttributeError) as e:
                    answer = {"usage": f"a malformed request to the eval server: {type(e).__name__}: {e}"}
                log(f"answered: {answer.get('verdict', {}).get('status') or answer}")
                if "restart" in answer:
                    close()
                    _send(conn, answer)
                    return
                _send(conn, answer)
            warm.after()
    finally:
        close()
        while not greeted.empty():  # greeted but not served: they start the next server
            conn, reader = greeted.get()
            with conn, reader:
                _send(conn, {"restart": "the server exited before it read this request"})
        warm.drop()


def greet(sock: socket.socket, name: str, token: str, greeted: queue.Queue, closing: threading.Event) -> None:
    """Accept each client of this user's (server_address.peer_problem), prove to it that this is the
    server it started (server_identity.proof of its nonce), and queue it for serve()."""
    sock.settimeout(0.25)  # to see `closing`
    while not closing.is_set():
        try:
            conn, _ = sock.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        try:
            _greet(conn, name, token, greeted)
        except Exception as e:  # never a dead greeter: the server would take connections and answer none
            log(f"dropped a connection: {type(e).__name__}: {e}")
            conn.close()


def _greet(conn: socket.socket, name: str, token: str, greeted: queue.Queue) -> None:
    conn.settimeout(HELLO_TIMEOUT_S)
    why = peer_problem(conn)
    if why:
        log(f"refused a connection: {why}")
        _send(conn, {"refused": why})
        conn.close()
        return
    reader = conn.makefile("rb")
    try:
        hello = json.loads(reader.readline(MAX_HELLO) or b"null")
        nonce = hello["nonce"] if isinstance(hello, dict) and hello.get("op") == "hello" else None
    except (OSError, ValueError, KeyError):
        nonce = None
    if not isinstance(nonce, str) or len(nonce) > 256:  # it went away (a client's check that the server runs)
        reader.close()
        conn.close()
        return
    _send(conn, {"proof": proof(token, name, nonce)})
    greeted.put((conn, reader))


def _send(conn: socket.socket, answer: dict) -> None:
    try:
        conn.sendall(json.dumps(answer).encode() + b"\n")
    except OSError:
        pass  # the client went away (Ctrl-C): the next one asks again


def log(message: str) -> None:
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cuda_agent.eval.server")
    ap.add_argument("--address", required=True, help="abstract socket name, without its leading NUL")
    ap.add_argument("--records", required=True, type=Path, help="this user's 0700 folder of server records")
    ap.add_argument("--idle", type=float, default=600.0)
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # clean up: the evaluator's spares and task copy
    name = "\0" + a.address
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(name)
    except OSError as e:  # another client started one first: it serves
        log(f"not serving {a.address}: {e.strerror}")
        return 0
    try:  # bound first: the record is this process's only while it holds the address
        token = publish(a.records, name, os.getpid())
    except IdentityError as e:
        log(f"not serving {a.address}: {e}")
        return 1
    sock.listen(16)
    log(f"serving {a.address}, exits after {a.idle:g} s idle")
    serve(sock, a.idle, name, token, a.records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
