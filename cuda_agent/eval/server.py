"""`cuda-agent eval`'s warm server: the parent of its evaluations, kept alive between them.

A new `cuda-agent eval` spends most of its time before the evaluation starts: python, the torch
import, the CUDA context, the task's reference and determinism check, and the jailed recorder's
and judge's own start-up. This process does that once per task and settings and answers each
`eval` with the same Evaluator the command would have made (cli_eval.py). Nothing changes for
the candidate: each evaluation still takes a recorder and a judge that never ran anything else,
and the next pair starts after the answer went out, while the user edits (not during a timing).

One task per server (its module runs here: what it sets at import must not reach another task's
reference), one request at a time, in the order they come (one evaluation at a time on the
device). It exits after `--idle` seconds without one, or when its task file was edited. Started by server_client.start; `python -m
cuda_agent.eval.server --address NAME --device D --idle S`, its stderr to a log.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from cuda_agent.eval.server_address import peer_problem

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
        answer = {"verdict": verdict.model_dump(mode="json"), "task": info,
                  "name": self.name or Path(req["task"].partition("::")[0]).stem,
                  "server": {"pid": os.getpid(), "evaluations": self.evaluations, "reused": reused}}
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


def serve(sock: socket.socket, idle_s: float) -> None:
    warm = Warm()
    try:
        while True:
            sock.settimeout(idle_s if idle_s > 0 else None)
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                log(f"idle for {idle_s:g} s: exiting")
                return
            with conn:
                conn.settimeout(None)
                why = peer_problem(conn)
                if why:
                    log(f"refused a connection: {why}")
                    _send(conn, {"refused": why})
                    continue
                line = conn.makefile("rb").readline(MAX_REQUEST)
                if not line:  # connected and went away (a client's check that it runs)
                    continue
                try:
                    req = json.loads(line)
                    answer = (warm.handle(req) if req.get("op") == "evaluate"
                              else {"usage": f"unknown op {req.get('op')!r}"})
                except (ValueError, KeyError, TypeError, AttributeError) as e:
                    answer = {"usage": f"a malformed request to the eval server: {type(e).__name__}: {e}"}
                log(f"answered: {answer.get('verdict', {}).get('status') or answer}")
                if "restart" in answer:
                    sock.close()  # free the address first: the client starts the next server at once
                    _send(conn, answer)
                    return
                _send(conn, answer)
            warm.after()
    finally:
        warm.drop()


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
    ap.add_argument("--idle", type=float, default=600.0)
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # clean up: the evaluator's spares and task copy
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind("\0" + a.address)
    except OSError as e:  # another client started one first: it serves
        log(f"not serving {a.address}: {e.strerror}")
        return 0
    sock.listen(16)
    log(f"serving {a.address}, exits after {a.idle:g} s idle")
    serve(sock, a.idle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
