"""The shell tool: `bash -c` in the workspace, off unless the run allows it. The command runs in
the jail (cuda_agent/jail.py): it can write the workspace and nothing else (not the judge's task
copy, not the caches), sees the GPU but no network and no other process, gets an environment
from the allowlist (no credentials), and dies with everything it started when it ends or times
out. Output is kept to a head and a tail however much it prints."""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

from pydantic import Field

from cuda_agent.jail import Jail, JailUnavailable, kill_group, sandbox_enabled
from cuda_agent.run_folder import RunFolder

from .base import StrictArgs, Tool, ToolContext, ToolError, ToolResult

KEEP_BYTES = 32 * 1024  # of output kept at each end; the observation is bounded further by `run`


class Shell(Tool):
    name = "shell"
    description = "Run a bash command in the workspace; shows its output and exit code."

    class Args(StrictArgs):
        command: str = Field(min_length=1, description="a bash command line")
        timeout: int = Field(0, ge=0, description="seconds; 0 = the run's limit")

    def execute(self, a: Args, ctx: ToolContext) -> ToolResult:
        if not ctx.tools.allow_shell:
            raise ToolError(
                "the shell is disabled in this run (allow_shell is off); use view_file, "
                "edit_file and list_files for files, and compile, verify, benchmark, profile"
            )
        cap = ctx.tools.shell_timeout_s  # both the default and the most one call may ask for
        limit = min(a.timeout or cap, cap)
        try:
            rc, out, timed_out = run_command(a.command, Path(ctx.workspace.root), limit, sandbox=ctx.eval.sandbox)
        except JailUnavailable as e:
            raise ToolError(f"the shell runs only in the jail: {e}") from None
        capped = f" (capped at the run's limit of {cap:g} s)" if a.timeout > cap else ""
        head = f"timed out after {limit:g} s{capped}: killed" if timed_out else f"exit code {rc}"
        return ToolResult(
            observation=f"{head}\n{out}" if out else f"{head} (no output)",
            status="error" if timed_out or rc != 0 else "ok",
            data={"exit_code": rc, "timed_out": timed_out, "timeout": limit},
        )


def run_command(command: str, cwd: Path, timeout: float, sandbox: bool | None = None) -> tuple[int, str, bool]:
    """Run `bash -c command`; return (exit code, output with stderr merged, timed out)."""
    cwd = Path(cwd).resolve()
    proc = shell_jail(cwd, sandbox).popen(
        ["bash", "-c", command], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out = _Collector(proc.stdout)
    try:
        rc, timed_out = proc.wait(timeout=timeout), False
    except subprocess.TimeoutExpired:
        rc, timed_out = -signal.SIGKILL, True
    kill_group(proc.pid)  # on timeout the command; otherwise whatever it left in the background
    proc.wait()
    out.thread.join(2.0)  # a process that left the group may hold the pipe: don't wait on it
    # the jail's limits it reached (a fork bomb, a full /tmp: cuda_agent/jail_limits.py), one line each, first
    notes = "".join(f"the command {hit}\n" for hit in proc.limit_hits())
    return rc, notes + out.text(), timed_out


def shell_jail(cwd: Path, sandbox: bool | None = None) -> Jail:
    """The shell's jail: the GPU's device nodes, writes to the workspace `cwd` only; the run folder
    around it (verdict ledger, trajectory) stays out of sight. The jail tests attack this one too."""
    return Jail(
        writable=[cwd],
        gpu=True,
        cwd=cwd,
        hidden=[RunFolder.around(cwd).path],
        enabled=sandbox_enabled() if sandbox is None else sandbox,
    )


class _Collector:
    """Reads a pipe to its end in a thread, keeping the first and last KEEP_BYTES."""

    def __init__(self, pipe) -> None:
        self.head, self.tail, self.total = bytearray(), bytearray(), 0
        self._pipe = pipe
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with self._pipe:
            while chunk := self._pipe.read1(65536):
                self.total += len(chunk)
                room = KEEP_BYTES - len(self.head)
                self.head += chunk[:room]
                self.tail = (self.tail + chunk[room:] if room < len(chunk) else self.tail)[-KEEP_BYTES:]

    def text(self) -> str:
        cut = self.total - len(self.head) - len(self.tail)
        middle = f"\n[... {cut} bytes of output cut ...]\n" if cut > 0 else ""
        return (bytes(self.head).decode(errors="replace") + middle + bytes(self.tail).decode(errors="replace")).rstrip(
            "\n"
        )
