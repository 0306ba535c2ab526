"""The pipe between the parent and a jailed evaluation process, both ends.

Requests are JSON lines on the child's stdin; answers are JSON lines on a separate pipe (the
child's stdout and stderr go to a log). Both are typed (protocol.py): each request names the reply
it gets, and a reply is parsed as that type or the child has failed. JSON only, both ways: nothing
a jailed process sends is ever unpickled. A judge's answers are still the candidate's to write (its
code shares the process): what a verdict needs is in memory the parent lends for each call
(handover.py), passed as a file descriptor on a socket of its own, and timed by the parent's clock.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, TypeVar

from cuda_agent.eval.protocol import Exit, ProtocolError, Ready, Reply, Request, parse_reply, parse_request
from cuda_agent.eval.scratch import remove_tree
from cuda_agent.jail import Jail, kill_group, thread_count
from cuda_agent.untrusted_files import tail_of_fd

_EXEC_TIME = time.time()  # (in the child) when this module was first imported: about when python started


class ChildError(RuntimeError):
    """The child died, hung or could not start; `kind` is 'timeout', 'crash' or 'start'."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


R = TypeVar("R", bound=Reply)


def exit_text(code: int | None) -> str:
    """How a jailed process ended. bubblewrap exits 128+N when its child died of signal N."""
    if code is None:
        return "it hung up without exiting and was killed"
    sig = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else None
    if sig:
        try:
            return f"killed by {signal.Signals(sig).name}" + (f", exit code {code}" if code > 0 else "")
        except ValueError:
            pass
    return f"exit code {code}"


class JailedChild:
    """A jailed `python -m MODULE ARGS...` that answers requests; started ahead of need."""

    def __init__(
        self,
        module: str,
        args: list[str],
        jail: Jail,
        scratch: Path,
        start_timeout: float = 120.0,
        handover: bool = False,
    ):
        self.scratch = scratch
        self.name = module.rsplit(".", 1)[-1]  # recorder, judge
        self.log_path = scratch / f"{self.name}.log"
        # the log is read through this descriptor, opened before the child runs: whatever the child
        # puts at log_path later (a symlink to a key file, a FIFO) is never opened (untrusted_files)
        self._log: int | None = os.open(
            self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        read_fd, write_fd = os.pipe()
        self.sock: socket.socket | None = None  # where lent blocks go (handover.py)
        theirs: socket.socket | None = None
        extra, passed = [], [write_fd]
        if handover:
            self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            extra, passed = ["--handover-fd", str(theirs.fileno())], [write_fd, theirs.fileno()]
        try:
            self.proc = jail.popen(
                [sys.executable, "-m", module, "--reply-fd", str(write_fd), *extra, *args],
                stdin=subprocess.PIPE,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                pass_fds=tuple(passed),
            )
        except BaseException:
            for fd in (self._log, read_fd, write_fd):
                os.close(fd)
            for end in (self.sock, theirs):
                if end is not None:
                    end.close()
            raise
        os.close(write_fd)
        if theirs is not None:
            theirs.close()
        assert self.proc.stdin is not None  # stdin=PIPE
        self._stdin = self.proc.stdin
        self._reply: int | None = read_fd
        self._buf = b""
        self._start_timeout = start_timeout
        self._ready: Ready | None = None
        self.peak_bytes = 0  # the largest GPU peak the child reported (it says so in every answer)

    def wait_ready(self) -> Ready:
        if self._ready is None:
            msg = self._receive(self._start_timeout, "starting", Ready)
            if not msg.ok:
                self.kill()
                raise ChildError("start", msg.error or "the process failed to start")
            self._ready = msg
        return self._ready

    def request(self, req: Request, timeout: float, lend: int | None = None) -> Any:
        """Send `req` (with `lend`, a block's descriptor first) and wait up to `timeout` s for its
        reply, parsed as `type(req).reply`."""
        self.wait_ready()
        self.send(req, lend)
        return self.answer(req, timeout)

    def send(self, req: Request, lend: int | None = None) -> None:
        """The request alone (`answer` waits for its reply): the parent's clock may start in between.
        `lend`: a block's file descriptor, passed on the handover socket before the request."""
        if lend is not None:
            from cuda_agent.eval.handover import send_fd

            if self.sock is None:
                raise ValueError(f"the {self.name} was started without a handover socket: nothing can be lent")
            try:
                send_fd(self.sock, lend)
            except OSError:
                pass  # it died: the answer says how
        try:
            self._stdin.write(req.model_dump_json().encode() + b"\n")
            self._stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died: _receive says how

    def answered(self, seconds: float) -> bool:
        """Whether a whole reply has arrived within `seconds`; it stays for `answer` to read. False
        also when the child has died (then `answer` says how); never kills it."""
        return self._read_line(time.monotonic() + seconds, seconds) == "line"

    def _read_line(self, deadline: float, poll: float) -> str:
        """Read the reply pipe into the buffer until it holds a whole line ("line"), the deadline
        passes ("timeout"), or the pipe closes or the child exits ("gone"); `poll`: how often the
        child's exit is looked at while nothing comes."""
        fd = self._reply
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if fd is None:
                return "gone"
            if left <= 0:
                return "timeout"
            ready, _, _ = select.select([fd], [], [], min(left, poll))
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return "gone"
                self._buf += chunk
            elif self.proc.poll() is not None:
                return "gone"
        return "line"

    def answer(self, req: Request, timeout: float) -> Any:
        """Wait up to `timeout` s for the reply to `req` (sent by `send`), parsed as `type(req).reply`."""
        return self._receive(timeout, req.doing or req.op, type(req).reply)

    def _receive(self, timeout: float, what: str, reply: type[R]) -> R:
        if self._reply is None:  # killed already: nothing can answer
            raise ChildError("crash", f"the {self.name} was stopped before it answered while {what}")
        if self._read_line(time.monotonic() + timeout, 0.5) == "timeout":
            note = self.limits_note()
            self.kill()
            raise ChildError("timeout", f"{note}the {self.name} exceeded its {timeout:.0f} s limit while {what}")
        if b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            try:
                msg = parse_reply(line, reply)
            except ProtocolError as e:
                self.kill()
                raise ChildError("crash", f"the {self.name} sent {e} while {what}") from None
            self.peak_bytes = max(self.peak_bytes, msg.peak_bytes)
            if not msg.ok and (note := self.limits_note()):  # e.g. its write to a full /tmp failed
                msg.error = f"{note}{msg.error or 'unknown error'}"
            return msg
        tail = self.log_tail()  # before kill(), which closes the log
        note = self.limits_note()
        try:
            code = self.proc.wait(2)  # reaped: poll() right after the pipe closed could still say None
        except subprocess.TimeoutExpired:
            code = None
        self.kill()
        raise ChildError("crash", f"{note}the {self.name} died while {what} ({exit_text(code)}){tail}")

    def limits_note(self) -> str:
        """The jail limits the candidate reached (jail_limits.py), as the start of a sentence ("" when none)."""
        hits: list[str] = getattr(self.proc, "limit_hits", list)()
        return f"the candidate {'; '.join(hits)}; " if hits else ""

    def threads(self) -> int:
        """Threads of every process of this child's tree, counted from outside the jail."""
        return thread_count(self.proc.pid) if self.proc.poll() is None else 0

    def log_tail(self, n: int = 1500) -> str:
        """The last `n` bytes the child wrote to its log, as the end of a sentence ("" when none)."""
        if self._log is None:
            return ""
        try:
            text = tail_of_fd(self._log, n, shown=f"the {self.name}'s log").decode(errors="replace").strip()
        except OSError as e:  # UnreadableFile: its one line stands where the output would
            return f"; its log was not read: {e}"
        return f"; its output ended with:\n{text}" if text else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """Kill the whole jail (its process group; the namespace takes the rest with it)."""
        if self.proc.poll() is None:
            if not kill_group(self.proc.pid):
                self.proc.kill()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        try:
            self._stdin.close()
        except OSError:
            pass
        if self._reply is not None:
            os.close(self._reply)
            self._reply = None
        if self._log is not None:
            os.close(self._log)
            self._log = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        remove_tree(self.scratch)  # nested 3000 folders deep by the candidate, too

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._stdin.write(Exit().model_dump_json().encode() + b"\n")
                self._stdin.flush()
                self.proc.wait(2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


# -- the child's end -----------------------------------------------------------------------
def serve(reply_fd: int, start: Callable[[], dict[str, Callable[[Any], dict]]], kind: Any) -> None:
    """Run in the child: `start()` sets up and returns the handlers (op -> handler of that typed
    request); then parse each request line as `kind` (protocol.JudgeRequest, RecorderRequest) and
    answer it, until exit."""
    out = os.fdopen(reply_fd, "wb", buffering=0)

    def send(obj: dict) -> None:
        out.write(json.dumps(obj).encode() + b"\n")

    try:
        handlers = start()
    except BaseException as e:
        send({"ok": False, "error": f"start failed: {type(e).__name__}: {e}"})
        return
    started: Any = handlers.pop("_started", {})
    # what the start-up's warm-ups drew (an input set, twice) goes back before the wait: a spare
    # judge waits beside the parent's references (13 GB held there on KernelBench's 6 GB tasks)
    release_cached()
    send({"ok": True, "ready": True, "pid": os.getpid(), "started": started, "since_exec": time.time() - _EXEC_TIME})
    for line in sys.stdin.buffer:
        try:
            req = parse_request(line, kind)
        except ProtocolError as e:
            send({"ok": False, "error": f"a request that does not follow the protocol: {e}"})
            continue
        if req.op == "exit":
            return
        try:
            resp = handlers[req.op](req)
        except BaseException as e:  # the candidate's failure is a verdict, not a crash
            if getattr(e, "one_line", False):  # its message says all (kernels/binding.py's KernelNeedsGpu)
                resp = {"ok": False, "error": str(e)}
            else:
                tb = traceback.format_exception(type(e), e, e.__traceback__)
                resp = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": "".join(tb[-6:])[-3000:]}
        if req.op in RELEASE_AFTER:
            release_cached()
        try:
            send({**resp, "peak_bytes": _gpu_peak()})
        finally:
            sys.stdout.flush()
            sys.stderr.flush()


# after these requests the child holds nothing the next one reuses: the allocator's cached blocks go
# back to the device, so the parent's references and the next process fit beside it (never
# between a timed loop's requests: those reuse their blocks)
RELEASE_AFTER = frozenset({"run"})


def release_cached() -> None:
    """Give the blocks torch's CUDA allocator caches back to the device, in whichever process this
    runs (a jailed child, or the parent between its phases); nothing where CUDA never started."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception:
        pass


def _gpu_peak() -> int:
    """This process's peak of torch's CUDA allocator so far; 0 without CUDA."""
    torch = sys.modules.get("torch")
    try:
        return torch.cuda.max_memory_allocated() if torch is not None and torch.cuda.is_initialized() else 0
    except Exception:  # a context broken by the candidate (illegal address): the answer matters more
        return 0


def reply_fd_arg(argv: list[str]) -> tuple[int, list[str]]:
    """Split `--reply-fd N` off a child's argv."""
    fd, rest = fd_arg(argv, "--reply-fd")
    if fd is None:
        raise SystemExit("started by the evaluator only: --reply-fd is required")
    return fd, rest


def fd_arg(argv: list[str], flag: str) -> tuple[int | None, list[str]]:
    """Split `FLAG N` (a descriptor the parent passed) off a child's argv; None when absent."""
    if flag not in argv:
        return None, argv
    i = argv.index(flag)
    return int(argv[i + 1]), argv[:i] + argv[i + 2 :]
