"""Keep a candidate's worker from writing anywhere but its scratch folder (Linux Landlock).

The worker applies this to itself before importing the candidate, so the candidate cannot
write the baseline cache, the build cache, the installed harness or the run's records.
Landlock needs no privileges (kernel >= 5.13); where it is missing the verdict says the
worker ran without write protection. Plain ctypes: no maintained Python binding exists
that we could rely on being installed on the GPU machines.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on x86_64 and aarch64
_PR_SET_NO_NEW_PRIVS = 38
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_RULE_PATH_BENEATH = 1
_O_PATH = getattr(os, "O_PATH", 0o10000000)

# write-like rights of ABI 1, then REFER (ABI 2) and TRUNCATE (ABI 3)
_WRITE_V1 = (
    (1 << 1)  # WRITE_FILE
    | (1 << 4)  # REMOVE_DIR
    | (1 << 5)  # REMOVE_FILE
    | (1 << 6)  # MAKE_CHAR
    | (1 << 7)  # MAKE_DIR
    | (1 << 8)  # MAKE_REG
    | (1 << 9)  # MAKE_SOCK
    | (1 << 10)  # MAKE_FIFO
    | (1 << 11)  # MAKE_BLOCK
    | (1 << 12)  # MAKE_SYM
)
_REFER, _TRUNCATE = 1 << 13, 1 << 14


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """Landlock ABI version of this kernel, or 0 when unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        v = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except (OSError, AttributeError):
        return 0
    return max(int(v), 0)


def restrict_writes(writable: list[Path]) -> str | None:
    """Allow writes only beneath `writable` for this thread and its future children.

    Returns None on success, else why it could not be applied (the caller records it).
    """
    abi = landlock_abi()
    if abi < 1:
        return "Landlock is not available on this kernel"
    handled = _WRITE_V1 | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    libc = ctypes.CDLL(None, use_errno=True)
    attr = _RulesetAttr(handled)
    fd = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0)
    if fd < 0:
        return f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}"
    try:
        for path in writable:
            if not path.exists():
                continue
            pfd = os.open(path, _O_PATH | os.O_CLOEXEC)
            try:
                rights = handled if path.is_dir() else (handled & ((1 << 1) | _TRUNCATE))
                rule = _PathBeneathAttr(rights, pfd)
                if libc.syscall(_SYS_ADD_RULE, fd, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                    return f"landlock_add_rule({path}) failed: {os.strerror(ctypes.get_errno())}"
            finally:
                os.close(pfd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"prctl(NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
        if libc.syscall(_SYS_RESTRICT_SELF, fd, 0) != 0:
            return f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(fd)
    return None


def isolate_network() -> str | None:
    """Move this process into a new, empty network namespace (no interfaces up: nothing can be
    reached, loopback included). Must run while the process is single-threaded, before torch is
    imported. Root can do it directly; others through a user namespace that maps their own ids.
    Returns None on success, else why not (the caller records it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) == 0:
        return None
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        return f"no network isolation: unshare failed ({os.strerror(ctypes.get_errno())})"
    try:  # keep our own uid/gid inside the namespace, so files and devices stay ours
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    except OSError as e:
        return f"network isolated, but the user namespace's id maps failed ({e})"
    return None


# Variables code we don't trust (candidate workers, the model's shell) must never read: names
# that look like a credential's (cuda_agent.secrets.looks_secret_name: KEY, TOKEN, SECRET,
# PASSWORD/PASSWD, CREDENTIAL, AUTH, COOKIE, SESSION, DSN, PAT, DATABASE_URL...), names with
# these words anywhere (wider than that test: TOKENIZERS_PARALLELISM goes too, harmlessly), and
# these providers' variables, all of them (base URLs and org ids say who pays).
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
_SECRET_PREFIXES = ("AWS_", "AZURE_", "GOOGLE_", "OPENAI", "ANTHROPIC", "GEMINI", "OPENROUTER", "HF_",
                    "HUGGING", "LITELLM", "DEEPSEEK", "MISTRAL", "GROQ", "TOGETHER", "COHERE")


def is_secret(name: str) -> bool:
    from cuda_agent.secrets import looks_secret_name

    upper = name.upper()  # case-insensitive: `openai_api_key` is as secret as `OPENAI_API_KEY`
    return looks_secret_name(name) or any(w in upper for w in _SECRET_WORDS) or upper.startswith(_SECRET_PREFIXES)


def scrubbed_env(env: dict[str, str]) -> dict[str, str]:
    """A copy of `env` without the variables that could carry credentials."""
    return {k: v for k, v in env.items() if not is_secret(k)}
