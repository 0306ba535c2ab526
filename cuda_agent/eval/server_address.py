"""Where `cuda-agent eval`'s warm server listens, and who may talk to it.

The address is an abstract Unix socket (Linux): it has no file, and it lives in a network
namespace, so a jailed recorder or judge (bubblewrap --unshare-all: a namespace of its own) cannot
reach it; the server also refuses any peer of another uid or another user namespace. A candidate
that reached it could ask for an evaluation with the jail off. The other way round, the client
trusts only the server it started (server_identity.py): a name anyone may bind once it is free.

The name holds the task (a server serves one), the cache folder the server's record lies in (its
namespace: another cache, e.g. a test's own, is another set of servers) and a fingerprint of
everything that makes a server's answers differ from the in-process evaluation it stands for: this
package's files, the interpreter and the environment variables the harness, nvcc, torch and the
jail read. A client with another fingerprint gets a server of its own; an old server idles out.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import struct
import sys
from pathlib import Path

import cuda_agent

# the environment that reaches the evaluation (GPU numbering, nvcc, torch, caches, the jail's allowlist)
_ENV_PREFIXES = ("CUDA", "NVIDIA", "TORCH", "PYTORCH", "TRITON", "LD_", "PYTHON", "XDG_")
_ENV_NAMES = ("PATH", "HOME", "TMPDIR", "VIRTUAL_ENV", "CONDA_PREFIX")


def fingerprint() -> str:
    """Changes when the code, the interpreter or a relevant environment variable changes."""
    h = hashlib.sha256(sys.executable.encode())
    root = Path(cuda_agent.__file__).parent
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            st = os.stat(os.path.join(dirpath, name))
            h.update(f"{dirpath}/{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES) or k in _ENV_NAMES}
    h.update(json.dumps(env, sort_keys=True).encode())
    return h.hexdigest()[:16]


def address(device: str, task: str, inputs: str | None, namespace: Path) -> str:
    """The abstract socket name (leading NUL) of this user's server for `task` (its absolute
    path[::Class]) with `inputs` on `device`, whose record lies in the folder `namespace`."""
    which = hashlib.sha256(f"{task}\n{inputs}\n{namespace}".encode()).hexdigest()[:12]
    return f"\0cuda-agent-eval-{os.getuid()}-{re.sub('[^A-Za-z0-9]', '', device)}-{which}-{fingerprint()}"


def peer_credentials(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of `conn`, by the kernel (for a server: the one that listened)."""
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid


def peer_problem(conn: socket.socket) -> str | None:
    """Why the process at the other end of `conn` may not use the server, or None."""
    pid, uid = peer_credentials(conn)
    if uid != os.getuid():
        return f"uid {uid} is not the server's"
    try:
        if os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user"):
            return f"pid {pid} is in another user namespace (a jail)"
    except OSError as e:
        return f"pid {pid} cannot be checked ({e.strerror})"
    return None
