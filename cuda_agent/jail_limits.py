"""What one jail (cuda_agent/jail.py) may take of the machine, and how it is held to it.

- processes and threads, all of them together (`pids`, 1024): a cgroup of the pids controller where
  one can be made here (root, cgroup v2 or v1 writable), which fork() and pthread_create() inside
  then fail against; else, where the jail's user namespace maps to a user other than root,
  RLIMIT_NPROC set inside the jail (it counts that namespace's tasks only; it never binds root, and
  set outside the jail it would count every process of the user on the host); else (root without a
  writable cgroup) the watch below counts the jail's tasks and kills it when it goes over;
- its private /tmp and /dev/shm: tmpfs of a fixed size (bwrap --size), full at their limit;
- folders it writes on the host disk (an evaluation's scratch folder: `quota`): RLIMIT_FSIZE bounds
  each file, and the watch sums the folder's blocks and files and kills the jail when it goes over.

`Watch` runs beside each jail, from outside it: it polls what the kernel does not enforce itself and
keeps a one-line note of each limit the jail reached (`Watch.hits`, "filled its /tmp (limit 2 GiB)"),
which the caller puts in the verdict or the tool's answer; the run goes on. The limits' values can
be changed with the environment variables named in `_SETTINGS` (docs/harness.md).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cuda_agent.pid_alive import pid_alive

PIDS = 1024  # processes and threads of one jail: torch starts one thread a core (128 on the largest machines)
TMP_BYTES = 2 << 30  # its /tmp (nvcc's temporary files, HOME, caches of the tools it runs)
SHM_BYTES = 1 << 30  # its /dev/shm
SCRATCH_ENTRIES = 100_000  # files and folders in a watched folder: the judge's scratch holds a handful
POLL_S = 0.25
FAST_POLL_S = 0.02
# limit -> (the environment variable that changes it, its unit in tasks or bytes, the default)
_SETTINGS = {
    "pids": ("CUDA_AGENT_JAIL_PIDS", 1, PIDS),
    "tmp": ("CUDA_AGENT_JAIL_TMP_MIB", 1 << 20, TMP_BYTES),
    "shm": ("CUDA_AGENT_JAIL_SHM_MIB", 1 << 20, SHM_BYTES),
}
# run first in the jail, where RLIMIT_NPROC binds (the user namespace exists, its uid is not root)
NPROC_WRAPPER = (
    "import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_NPROC, (n, n)); "
    "os.execvp(sys.argv[2], sys.argv[2:])"
)


class LimitSettingError(ValueError):
    """A limit's environment variable holds no whole number above 0; the message says which and what to do."""


def setting(what: str) -> int:
    """The limit `what` ("pids", "tmp", "shm") in its unit (tasks, bytes): its variable, else the default."""
    name, unit, default = _SETTINGS[what]
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) == 0:
        shown = "processes and threads" if unit == 1 else "MiB"
        raise LimitSettingError(
            f"{name}={raw!r} is not a whole number of {shown} above 0: unset it (default {default // unit}) or give one"
        )
    return int(raw) * unit


def size_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} bytes"


# -- the pids cgroup ----------------------------------------------------------------------
@dataclass
class PidsCgroup:
    """One jail's cgroup of the pids controller: bwrap joins it before its exec (`join`, in the
    child), so every task of the jail is counted against pids.max; removed when the jail is gone."""

    path: Path
    limit: int
    _procs: int | None = None

    def join(self) -> None:
        """In the child between fork and exec (preexec): move this process into the cgroup."""
        if self._procs is not None:
            os.write(self._procs, b"0")

    def started(self) -> None:
        """In the parent once the child exists: the descriptor the child used is not needed any more."""
        if self._procs is not None:
            os.close(self._procs)
            self._procs = None

    def refusals(self) -> int:
        """How often a fork or thread creation in the jail failed against pids.max (pids.events)."""
        try:
            text = (self.path / "pids.events").read_text()
        except OSError:
            return 0
        m = re.search(r"^max (\d+)", text, re.M)
        return int(m.group(1)) if m else 0

    def remove(self, wait_s: float = 5.0) -> None:
        """rmdir once its tasks are gone (the jail's namespace takes them down after its init)."""
        self.started()
        deadline = time.monotonic() + wait_s
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() >= deadline:
                    return  # still busy: sweep_stale removes it after this process is gone
                time.sleep(0.05)


_SEQ = iter(range(1 << 62))
_SEQ_LOCK = threading.Lock()


def new_cgroup(limit: int) -> PidsCgroup | None:
    """A fresh pids cgroup of `limit` tasks under pids_base(), or None where none can be made here."""
    base = pids_base()
    if base is None:
        return None
    with _SEQ_LOCK:
        n = next(_SEQ)
    path = base / f"jail-{os.getpid()}-{n}"
    try:
        path.mkdir()
        (path / "pids.max").write_text(str(limit))
        procs = os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        with contextlib.suppress(OSError):
            path.rmdir()
        return None
    return PidsCgroup(path, limit, procs)


@functools.lru_cache(maxsize=1)
def pids_base() -> Path | None:
    """The folder this process makes its jails' pids cgroups in (`cuda-agent` at the top of a
    writable cgroup v2 hierarchy with the pids controller, else of cgroup v1's pids hierarchy), or
    None: not root, cgroups read-only (a container), no pids controller. Probed once per process;
    the cgroups of processes that are gone are removed on the way."""
    if os.environ.get("CUDA_AGENT_JAIL_CGROUP") == "0":  # tests of the other routes; a person never needs it
        return None
    for mount, version in _pids_hierarchies():
        base = mount / "cuda-agent"
        try:
            if version == 2:
                _enable_pids(mount)
            base.mkdir(exist_ok=True)
            if version == 2:
                _enable_pids(base)
            probe = base / f"probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            usable = (probe / "pids.max").exists() and os.access(probe / "cgroup.procs", os.W_OK)
            probe.rmdir()
        except OSError:
            continue
        if usable:
            sweep_stale(base)
            return base
    return None


def pids_route() -> str:
    """How a jail started here is held to its pids limit, in words (cuda-agent doctor)."""
    if pids_base() is not None:
        return f"a pids cgroup (under {pids_base()})"
    if os.getuid() != 0:
        return "RLIMIT_NPROC in the jail's user namespace"
    return "the parent's count only (root without a writable pids cgroup: a fork bomb is killed, not refused)"


def _pids_hierarchies() -> list[tuple[Path, int]]:
    """Mounted cgroup hierarchies that carry the pids controller, v2 first."""
    found: list[tuple[Path, int]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        mount = Path(fields[4].replace("\\040", " "))
        if rest[0] == "cgroup2":
            try:
                if "pids" in (mount / "cgroup.controllers").read_text().split():
                    found.insert(0, (mount, 2))
            except OSError:
                continue
        elif rest[0] == "cgroup" and "pids" in rest[2].split(","):
            found.append((mount, 1))
    return found


def _enable_pids(cgroup: Path) -> None:
    control = cgroup / "cgroup.subtree_control"
    if "pids" not in control.read_text().split():
        control.write_text("+pids")


def sweep_stale(base: Path) -> int:
    """Remove the jail cgroups of processes that are gone (an agent killed with -9); returns how many."""
    removed = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            m = re.match(r"^(?:jail|probe)-(\d+)-?", entry.name)
            if m and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1))):
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)
                    removed += 1
    return removed


# -- what the watch measures -------------------------------------------------------------
def jail_init(pid: int, children: Callable[[int], list[int]]) -> int | None:
    """bwrap's first child: the jail's init, inside its namespaces (bwrap itself stays outside)."""
    kids = children(pid)
    return kids[0] if kids else None


def open_jail_folder(pid: int, folder: str) -> int | None:
    """A descriptor of the jail's `folder`, reached through /proc/<pid>/root (pid in the jail), when it
    is a filesystem of the jail's own (not the host's of that name): it stays measurable through it
    after the jail is gone (a /tmp filled just before the exit)."""
    try:
        fd = os.open(f"/proc/{pid}/root{folder}", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        host = os.stat(folder).st_dev
    except OSError:
        host = os.stat("/").st_dev
    if os.fstat(fd).st_dev == host:  # still the host's: the jail is not set up (or it is gone)
        os.close(fd)
        return None
    return fd


def tmpfs_usage(fd: int) -> tuple[int, int]:
    """(bytes used, size) of the filesystem the descriptor is on."""
    st = os.fstatvfs(fd)
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_blocks * st.f_frsize


def folder_usage(root: Path, max_entries: int) -> tuple[int, int, str | None]:
    """(bytes allocated on disk, entries, why a folder could not be listed) below `root`, links not
    followed; a walk of its own, by stack (nesting deep enough for os.walk's recursion costs nothing),
    that stops past max_entries. A folder it cannot list (chmod 000, nested past what a path can
    name) hides what it holds: that is the third item, and the watch treats it as over."""
    used, entries, stack = 0, 0, [str(root)]
    while stack and entries <= max_entries:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                for e in it:
                    entries += 1
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue  # gone since it was listed
                    used += st.st_blocks * 512
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(e.path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            why = "nested deeper than a path can name" if exc.errno == errno.ENAMETOOLONG else exc.strerror
            return used, entries, why
    return used, entries, None


@dataclass
class Watch:
    """The limits the kernel does not hold a jail to itself, polled from outside while it runs, and
    a one-line note of each limit it reached. `kill` ends the jail (its process group)."""

    pid: int  # bwrap's
    kill: Callable[[], None]
    children: Callable[[int], list[int]]
    tasks: Callable[[int], int]  # threads of the tree under a pid, counted from /proc
    pids: int
    cgroup: PidsCgroup | None
    pids_enforced: bool  # a cgroup or RLIMIT_NPROC holds the jail to `pids`; else the watch kills
    tmpfs: dict[str, int]  # mount in the jail -> size
    tmpfs_enforced: bool  # bwrap --size made them that size; else the watch kills
    quota: dict[Path, int]  # folder on the host -> bytes
    hits: list[str] = field(default_factory=list)
    # check() runs in the watch and in the caller (limit_hits): one at a time
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _tmpfs_fds: dict[str, int] = field(default_factory=dict)  # mount -> descriptor of the jail's own

    def attach(self, alive: Callable[[], bool], timeout: float = 10.0) -> None:
        """While bwrap waits before it starts the command (--block-fd): the jail's /tmp and /dev/shm,
        opened through its init, so that they stay measurable to the end."""
        deadline = time.monotonic() + timeout
        while len(self._tmpfs_fds) < len(self.tmpfs) and time.monotonic() < deadline and alive():
            init = jail_init(self.pid, self.children)
            for mount in self.tmpfs:
                if init and mount not in self._tmpfs_fds and (fd := open_jail_folder(init, mount)) is not None:
                    self._tmpfs_fds[mount] = fd
            if len(self._tmpfs_fds) < len(self.tmpfs):
                time.sleep(0.002)

    def start(self, alive: Callable[[], bool]) -> None:
        threading.Thread(target=self._run, args=(alive,), daemon=True, name=f"jail-watch-{self.pid}").start()

    def _run(self, alive: Callable[[], bool]) -> None:
        # without a cgroup or RLIMIT_NPROC a fork bomb doubles in milliseconds: its processes are
        # counted every FAST_POLL_S (one listing of the jail's /proc), threads too every POLL_S
        step = POLL_S if self.pids_enforced else FAST_POLL_S
        last_full = 0.0
        try:
            while alive():
                if time.monotonic() - last_full >= POLL_S:
                    over, last_full = self.check(), time.monotonic()
                else:
                    over = self._processes_over()
                if over:
                    self.kill()
                    break
                time.sleep(step)
        finally:
            with self._lock:
                self.check()  # the last word: refusals since the last poll, what its /tmp held at the end
                for fd in self._tmpfs_fds.values():
                    os.close(fd)  # the jail's tmpfs and what it held go with the last descriptor
                self._tmpfs_fds.clear()
            if self.cgroup is not None:
                self.cgroup.remove()

    def check(self) -> bool:
        """Poll every limit once; record what was reached; True when the jail must be stopped."""
        with self._lock:
            return any([self._check_pids(), self._check_tmpfs(), self._check_quota()])

    def _check_pids(self) -> bool:
        if self.cgroup is not None:
            if self.cgroup.refusals():
                self._hit(self._hit_pids)
            return False
        tasks = self.tasks(self.pid) - 1  # bwrap outside the jail is not counted
        if self.pids_enforced:
            if tasks >= self.pids:  # RLIMIT_NPROC keeps no count of refusals: a jail seen at its limit hit it
                self._hit(self._hit_pids)
            return False
        return tasks > self.pids and self._hit(self._over_pids)

    def _check_tmpfs(self) -> bool:
        over = False
        for mount, fd in self._tmpfs_fds.items():
            size = self.tmpfs[mount]
            used = tmpfs_usage(fd)[0]
            if self.tmpfs_enforced and size - used < max(1 << 20, size // 100):
                self._hit(f"filled its {mount} (limit {size_text(size)}): write less there")
            elif not self.tmpfs_enforced and used > size:
                over = self._hit(f"filled its {mount} (limit {size_text(size)}) and was stopped: write less there")
        return over

    def _check_quota(self) -> bool:
        over = False
        for folder, limit in self.quota.items():
            used, entries, hidden = folder_usage(folder, SCRATCH_ENTRIES)
            if hidden and folder.exists():
                over = self._hit(
                    f"was stopped: a folder in its scratch folder cannot be listed ({hidden}), so its "
                    "size is unknown: leave its folders readable and shallow"
                )
            elif used > limit:
                over = self._hit(
                    f"filled its scratch folder (limit {size_text(limit)}) and was stopped: write "
                    "less there, or raise eval.scratch_gib if the task's outputs need more"
                )
            elif entries > SCRATCH_ENTRIES:
                over = self._hit(
                    f"made over {SCRATCH_ENTRIES} files in its scratch folder and was stopped: write fewer"
                )
        return over

    def _processes_over(self) -> bool:
        init = jail_init(self.pid, self.children)
        try:
            n = sum(name.isdigit() for name in os.listdir(f"/proc/{init}/root/proc")) if init else 0
        except OSError:
            return False
        return n > self.pids and self._hit(self._over_pids)  # bwrap's init counts, as in RLIMIT_NPROC

    @property
    def _hit_pids(self) -> str:
        return f"hit its limit of {self.pids} processes and threads (fork or thread creation failed): start fewer"

    @property
    def _over_pids(self) -> str:
        return f"went over its limit of {self.pids} processes and threads and was stopped: start fewer"

    def _hit(self, note: str) -> bool:
        """Record `note` once; True (so that `over = self._hit(...)` reads as what it does)."""
        with self._lock:
            if note not in self.hits:
                self.hits.append(note)
        return True
