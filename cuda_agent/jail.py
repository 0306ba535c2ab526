"""One jail for every process that runs code a model wrote (bubblewrap).

The evaluation's recorder (model_new.py) and judge (the built library), profile and sanitize runs
(profiling/runner.py) and the shell tool all start through `Jail.popen`. What a jailed process
gets, from one bwrap command line:

- an environment built from an allowlist at exec (`--clearenv`), never inherited then scrubbed;
- its own PID, IPC, UTS, cgroup and user namespaces: no view of other processes (/proc is
  its own), no signals out, and every process it started dies with it (`--die-with-parent`,
  and the namespace's init takes all of them down);
- its own network namespace: nothing reachable; no host filesystem sockets are mounted, so no
  unix socket either;
- a read-only view of the system (/usr and the interpreter, the package, the CUDA toolkit, a
  few /etc files; /proc/sys read-only), private /tmp and /dev/shm, only the GPU device nodes,
  and writes only to the folders it is given; folders it must not see (the run folder around
  the shell's workspace: the verdict ledger, the trajectory) shown empty, whatever bind holds them;
- rlimits: no core files, bounded file size and open files, bounded address space where no GPU
  is needed;
- limits on what it takes of the machine (cuda_agent/jail_limits.py): processes and threads, the
  size of its /tmp and /dev/shm, the folders it writes on the host disk (`quota`); each one reached
  is a one-line note on the process (`JailedProcess.limit_hits`), which the caller reports.

bubblewrap (Debian/Ubuntu package `bubblewrap`) is preferred to hand-written namespace code:
it is small, audited and used by Flatpak. Where it cannot run, `JailUnavailable` says what is
missing and that `--no-sandbox` is the explicit way out (`Jail(enabled=False)`: the same
allowlisted environment and process handling, without the namespaces).
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import signal
import site
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.jail_limits import NPROC_WRAPPER, LimitSettingError, Watch, new_cgroup, pids_base, setting

# what a jailed process may read of /etc: the dynamic loader, names of users and groups, time
_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "passwd",
    "group",
    "nsswitch.conf",
    "localtime",
    "alternatives",
    "nvidia",
)
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# procfs entries that must not be writable even by a process whose uid maps to root: /proc/driver holds
# the NVIDIA driver's files (registry, suspend: 0644, root's), which CUDA only reads
_PROC_RO = (
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/driver",
    "/proc/mtrr",
    "/proc/pressure",
)
# environment variables a jailed process may receive (values are paths or plain settings)
ENV_ALLOW = (
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_HOME",
    "CUDA_PATH",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "TERM",
    "COLUMNS",
    "CUDA_AGENT_NVCC",
)
NO_SANDBOX = "run with --no-sandbox to evaluate without the jail"
NO_SANDBOX_HINT = f"install bubblewrap (apt-get install bubblewrap) or {NO_SANDBOX}"


class JailUnavailable(RuntimeError):
    """The OS cannot provide the jail; the message names what is missing and the way out."""


def sandbox_enabled() -> bool:
    """The jail is on unless --no-sandbox / CUDA_AGENT_NO_SANDBOX=1 turned it off."""
    return os.environ.get("CUDA_AGENT_NO_SANDBOX") != "1"


def find_bwrap() -> str | None:
    return os.environ.get("CUDA_AGENT_BWRAP") or shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def jail_problem() -> str | None:
    """None when a jail can start here, else a one-line reason (probed once per process)."""
    bwrap = find_bwrap()
    if not bwrap:
        return f"bubblewrap (bwrap) is not installed: {NO_SANDBOX_HINT}"
    try:
        probe = Jail().argv(["/bin/true"], bwrap=bwrap)
    except JailUnavailable as e:  # a limit's variable holds no number
        return str(e)
    try:
        r = subprocess.run(
            probe, capture_output=True, text=True, timeout=30, env=minimal_env(), preexec_fn=_limits(None)
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap could not start ({e}): {NO_SANDBOX_HINT}"
    if r.returncode != 0:
        err = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return f"bubblewrap cannot create namespaces here ({err}): enable unprivileged user namespaces or {NO_SANDBOX}"
    return None


def minimal_env(extra: dict[str, str] | None = None, home: str = "/tmp") -> dict[str, str]:
    """The environment a jailed process starts with: the allowlist's values from ours, a PATH of
    system and interpreter folders, HOME and TMPDIR in its private /tmp, plus `extra`."""
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    bins = [
        str(Path(sys.executable).parent),
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ]
    cuda_home = _cuda_home()
    if cuda_home:
        bins.insert(1, str(cuda_home / "bin"))
    # the children import the package we run from (its folder is bound: _interpreter_paths), not one an
    # editable install elsewhere names: a second checkout's judge failed with "No module named cuda_agent"
    package_root = str(Path(__file__).resolve().parent.parent)
    python_path = [package_root, *(p for p in env.get("PYTHONPATH", "").split(":") if p)]
    env.update(
        PATH=":".join(dict.fromkeys(bins)),
        HOME=home,
        TMPDIR=home,
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        PYTHONPATH=":".join(dict.fromkeys(python_path)),
    )
    env.setdefault("LANG", "C.UTF-8")
    env.update(extra or {})
    return env


def _cuda_home() -> Path | None:
    for cand in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if cand and Path(cand).is_dir():
            return Path(cand).resolve()
    nvcc = shutil.which("nvcc")
    return Path(nvcc).resolve().parent.parent if nvcc else None


def _interpreter_paths() -> list[Path]:
    """What Python needs to run the package: prefixes, site-packages, sys.path, the package."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).resolve().parent.parent)}
    paths.update(site.getsitepackages())
    # not sys.path[0]: the folder of the script that started us, or the cwd of `python -m` (the user's
    # home, or "/", which bound over everything would undo the private /tmp, /dev and /proc): the
    # jailed child imports nothing from it
    paths.update(p for p in sys.path[0 if sys.flags.safe_path else 1 :] if p and os.path.isabs(p))
    paths.add(str(Path(__file__).resolve().parent))  # the package itself (an editable install too)
    paths.update(d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if os.path.isabs(d))
    cuda_home = _cuda_home()
    if cuda_home:
        paths.add(str(cuda_home))
    return [Path(p) for p in paths if p and os.path.isdir(p) and not _above_private(Path(p))]


def _above_private(path: Path) -> bool:
    """A folder holding /tmp, /dev or /proc (e.g. "/" on PYTHONPATH): bound, it would cover their private copies."""
    return any(path == Path(d) or path in Path(d).parents for d in ("/tmp", "/dev", "/proc"))


def _above_system(path: Path) -> bool:
    """A folder holding /usr, /lib... (a workspace made at /ws has "/" around it): never hidden."""
    return any(path == Path(d) or path in Path(d).parents for d in _SYSTEM)


def _covered(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


@functools.lru_cache(maxsize=4)
def _sizes_tmpfs(bwrap: str) -> bool:
    """Whether this bubblewrap has --size for a --tmpfs (0.8 and later); without it the watch
    stops a jail whose /tmp or /dev/shm grows past its limit."""
    try:
        r = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30, env=minimal_env())
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--size" in r.stdout + r.stderr


def _limit(what: str) -> int:
    try:
        return setting(what)
    except LimitSettingError as e:
        raise JailUnavailable(str(e)) from None


def _limits(address_space: int | None, file_size: int = 256 << 30):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), min(4096, hard)))
        if address_space:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return apply


@dataclass
class Jail:
    """One jailed command: what it may read and write, whether it sees the GPU, its environment."""

    writable: list[Path] = field(default_factory=list)  # bound read-write (scratch, the shell's workspace)
    readable: list[Path] = field(default_factory=list)  # bound read-only (candidate, build, task copy)
    gpu: bool = False  # bind the NVIDIA device nodes
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # on top of minimal_env()
    address_space: int | None = None  # RLIMIT_AS in bytes (not with a GPU: CUDA reserves huge ranges)
    enabled: bool = True  # False: --no-sandbox (recorded by the caller), same env and process handling
    # folders shown empty and read-only (the run folder around a workspace: its verdict ledger and
    # trajectory), even where a path bound for the interpreter holds them; binds inside still show
    hidden: list[Path] = field(default_factory=list)
    # what it may take of the machine (jail_limits.py; the defaults and their variables are there)
    pids: int = field(default_factory=lambda: _limit("pids"))  # processes and threads, all together
    tmp_bytes: int = field(default_factory=lambda: _limit("tmp"))  # its /tmp
    shm_bytes: int = field(default_factory=lambda: _limit("shm"))  # its /dev/shm
    quota: dict[Path, int] = field(default_factory=dict)  # a writable folder -> bytes it may hold (watched)
    file_size: int = 256 << 30  # RLIMIT_FSIZE: the largest file it may write

    def argv(
        self, cmd: list[str], bwrap: str | None = None, nproc_inside: bool | None = None, block_fd: int | None = None
    ) -> list[str]:
        """The bwrap command line. `nproc_inside`: RLIMIT_NPROC is set first thing in the jail (the
        pids limit where no cgroup holds it and the jail's uid is not root); default: where no
        pids cgroup can be made here. `block_fd`: bwrap sets the jail up, then waits for a byte
        on it before it starts `cmd` (so that the watch opens the jail's /tmp first)."""
        if not self.enabled:
            return list(cmd)
        bwrap = bwrap or find_bwrap()
        if not bwrap:
            raise JailUnavailable(f"bubblewrap (bwrap) is not installed: {NO_SANDBOX_HINT}")
        if nproc_inside is None:
            nproc_inside = pids_base() is None
        if nproc_inside and os.getuid() != 0:
            cmd = [sys.executable, "-I", "-S", "-c", NPROC_WRAPPER, str(self.pids), *cmd]
        a = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        if os.getuid() == 0:  # inside, a uid of its own (the process still maps to root outside)
            a += ["--uid", "65534", "--gid", "65534"]
        roots: list[Path] = []
        for p in _SYSTEM:
            if os.path.islink(p):
                a += ["--symlink", os.readlink(p), p]
            elif os.path.isdir(p):
                a += ["--ro-bind", p, p]
                roots.append(Path(p))
        # private /proc, /dev, /tmp first: the binds below may lie under /tmp (a venv, a scratch folder)
        a += ["--proc", "/proc"]
        for p in _PROC_RO:
            a += ["--ro-bind-try", p, p]
        sized = _sizes_tmpfs(bwrap)
        a += ["--dev", "/dev"]
        for mount, size in (("/tmp", self.tmp_bytes), ("/dev/shm", self.shm_bytes)):
            a += [*(["--size", str(size)] if sized else []), "--tmpfs", mount]
        a += ["--ro-bind-try", "/sys", "/sys"]
        for name in _ETC:
            p = Path("/etc") / name
            if p.exists():
                a += ["--ro-bind", str(p), str(p)]
        for p in sorted(_interpreter_paths()):
            if not _covered(p, roots):
                a += ["--ro-bind", str(p), str(p)]
                roots.append(p)
        if self.gpu:
            for dev in sorted(Path("/dev").glob("nvidia*")):
                if dev.exists():
                    a += ["--dev-bind", str(dev), str(dev)]
        hidden = [p for p in map(Path, self.hidden) if not _above_private(p) and not _above_system(p)]
        for p in hidden:
            a += ["--tmpfs", str(p)]
            a += [arg for r in roots if p in r.parents for arg in ("--ro-bind", str(r), str(r))]
        for flag, paths in (("--ro-bind", self.readable), ("--bind", self.writable)):
            a += [arg for p in paths for arg in (flag, str(p), str(p))]
        a += [arg for p in hidden for arg in ("--remount-ro", str(p))]
        # /dev's own tmpfs (its nodes, /dev/shm and /dev/pts are mounts of their own) and the sandbox's
        # root, where bwrap made mount points: read-only, or each could take half the memory unbounded
        a += ["--remount-ro", "/dev", "--remount-ro", "/"]
        if self.cwd:
            a += ["--chdir", str(self.cwd)]
        if block_fd is not None:
            a += ["--block-fd", str(block_fd)]
        a += ["--clearenv"]
        for k, v in minimal_env(self.env).items():
            a += ["--setenv", k, v]
        return a + ["--", *cmd]

    def popen(self, cmd: list[str], **kwargs) -> JailedProcess:
        """Start `cmd` in the jail, in a process group of its own (so it can be killed whole), in a
        pids cgroup of its own where one can be made, watched for its limits (jail_limits.Watch)."""
        problem = jail_problem() if self.enabled else None
        if problem:
            raise JailUnavailable(problem)
        cgroup = new_cgroup(self.pids) if self.enabled else None
        rlimits = _limits(None if self.gpu else self.address_space, self.file_size)

        def before_exec() -> None:
            if cgroup is not None:
                cgroup.join()
            rlimits()

        block_r, block_w = os.pipe() if self.enabled else (None, None)
        pass_fds = (*kwargs.pop("pass_fds", ()), *([block_r] if self.enabled else []))
        try:
            proc = JailedProcess(
                self.argv(cmd, nproc_inside=cgroup is None, block_fd=block_r),
                env=minimal_env(self.env),
                start_new_session=True,
                preexec_fn=before_exec,
                pass_fds=pass_fds,
                **kwargs,
            )
        except BaseException:
            if cgroup is not None:
                cgroup.remove(wait_s=0)
            if block_w is not None:
                os.close(block_w)
            raise
        finally:
            if block_r is not None:
                os.close(block_r)
        if cgroup is not None:
            cgroup.started()
        if block_w is not None:
            proc.watch = self._watch(proc, cgroup)
            try:
                proc.watch.attach(lambda: proc.poll() is None)
            finally:
                with contextlib.suppress(OSError):  # bwrap already gone: its exit says why
                    os.write(block_w, b"go")
                os.close(block_w)
            proc.watch.start(lambda: proc.poll() is None)
        return proc

    def _watch(self, proc: JailedProcess, cgroup) -> Watch:
        """What the parent measures of this jail while it runs: what no cgroup, rlimit or tmpfs size holds."""
        return Watch(
            pid=proc.pid,
            kill=lambda: kill_group(proc.pid) or proc.kill(),
            children=_children,
            tasks=thread_count,
            pids=self.pids,
            cgroup=cgroup,
            pids_enforced=cgroup is not None or os.getuid() != 0,  # not root: RLIMIT_NPROC (argv)
            tmpfs={"/tmp": self.tmp_bytes, "/dev/shm": self.shm_bytes},
            tmpfs_enforced=_sizes_tmpfs(find_bwrap() or ""),
            quota={Path(p): n for p, n in self.quota.items()},
        )


class JailedProcess(subprocess.Popen):
    """A jailed command's process (bwrap's), with the watch over its limits."""

    watch: Watch | None = None

    def limit_hits(self) -> list[str]:
        """One line per limit the jail reached so far ("filled its /tmp (limit 2 GiB): ..."), checked
        once more now: a /tmp it filled just before it failed, a fork refused since the last poll."""
        if self.watch is None:
            return []
        self.watch.check()
        return list(self.watch.hits)


def _children(pid: int) -> list[int]:
    try:
        return [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it, read from /proc by the caller (outside the jail)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                kids = Path(f"/proc/{p}/task/{task}/children").read_text().split()
                todo.extend(int(k) for k in kids)
        except OSError:
            continue
    return out


def thread_count(pid: int) -> int:
    """Threads of every process in the tree under `pid` (the jail's bwrap), counted from outside."""
    n = 0
    for p in descendants(pid):
        with contextlib.suppress(OSError):
            n += len(os.listdir(f"/proc/{p}/task"))
    return n


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal process group `pgid` (a jail or a child started in a session of its own); False when
    the group is gone or not ours to signal, which callers treat as already ended."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
