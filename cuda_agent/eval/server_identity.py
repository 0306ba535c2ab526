"""Who answers at the warm eval server's address: the server's record, and the proof it gives.

An abstract socket name is anyone's to bind once its server has exited: another user's process, a
process of this user that is not the server, a server of an older fingerprint. So `cuda-agent eval`
takes an answer only from a peer that shows both:

- the kernel's word (SO_PEERCRED) that it runs as this user and is the very process the server's
  record names (the record is written by the process that bound the address, after it bound it);
- an HMAC of the client's fresh nonce under the record's random token. The record is a 0600 file
  in a 0700 folder of this user (opened without following a symlink, checked to be a regular file
  the user owns), so only the server that wrote it, and this user, know the token: a reused pid
  over a stale record, or a squatter that copied the pid, still cannot answer.

Why not a filesystem socket in that folder instead: it would be reachable by path from any network
namespace, so the jail's isolation from the server (the abstract socket exists only in the host's
network namespace, which no jailed process shares) would then rest on that folder never being bound
into a jail. The abstract socket keeps that boundary; the record adds who is behind it.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
import socket
import stat
from pathlib import Path

from cuda_agent.eval.server_address import peer_credentials

HELLO_TIMEOUT_S = 10.0  # the server answers the identity check at once, even while it evaluates
MAX_HELLO = 4096


class IdentityError(Exception):
    """A record folder or record that cannot be trusted: one line that says what to do."""


def records_dir(cache_root: Path) -> Path:
    """This user's folder of server records, in the cache that the address also derives from."""
    return cache_root / f"eval-servers-{os.getuid()}"


def open_records(folder: Path, create: bool = False) -> int:
    """A descriptor of `folder`, after checking that only this user can use it (made 0700 if `create`)."""
    if create:
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass  # checked below, as any
        except OSError as e:
            raise IdentityError(f"cannot make the eval server's record folder {folder}: {e.strerror}") from None
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        what = "is a symlink or not a folder" if e.errno in (errno.ELOOP, errno.ENOTDIR) else e.strerror
        raise IdentityError(f"the eval server's record folder {folder} {what}: remove it") from None
    st = os.fstat(fd)
    problem = _owner_problem(st)
    if problem:
        os.close(fd)
        raise IdentityError(f"the eval server's record folder {folder} {problem}")
    return fd


def publish(folder: Path, name: str, pid: int) -> str:
    """Write the record of the server at `name` (its pid, a new token) and return the token."""
    token = secrets.token_hex(32)
    fd = open_records(folder, create=True)
    tmp = f".{_file(name)}.{pid}.tmp"
    try:
        try:
            os.unlink(tmp, dir_fd=fd)  # left by a server of the same pid that died while it wrote
        except FileNotFoundError:
            pass
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
        with os.fdopen(out, "w") as f:
            json.dump({"pid": pid, "token": token}, f)
        os.replace(tmp, _file(name), src_dir_fd=fd, dst_dir_fd=fd)  # a stale record of a dead server goes
    except OSError as e:
        raise IdentityError(f"cannot write the eval server's record in {folder}: {e.strerror}") from None
    finally:
        os.close(fd)
    return token


def withdraw(folder: Path, name: str, pid: int) -> None:
    """Remove the record of the server at `name` if it is this pid's: by the server, while it still
    holds the address (so no newer server's record can be there yet)."""
    try:
        if read_record(folder, name)["pid"] == pid:
            fd = open_records(folder)
            try:
                os.unlink(_file(name), dir_fd=fd)
            finally:
                os.close(fd)
    except (IdentityError, OSError):
        pass  # gone already, or another server's now


def read_record(folder: Path, name: str) -> dict:
    """{"pid", "token"} of the server this user started at `name`, read as safely as written."""
    fd = open_records(folder)
    try:
        rec = os.open(_file(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except FileNotFoundError:
        raise IdentityError(f"this user started no server there (no record of one in {folder})") from None
    except OSError as e:
        raise IdentityError(f"its record in {folder} cannot be opened ({e.strerror})") from None
    finally:
        os.close(fd)
    with os.fdopen(rec, "rb") as f:
        st = os.fstat(f.fileno())
        problem = "is not a regular file" if not stat.S_ISREG(st.st_mode) else _owner_problem(st)
        if problem:
            raise IdentityError(f"its record {folder / _file(name)} {problem}")
        text = f.read(MAX_HELLO)
    try:
        record = json.loads(text)
        if isinstance(record["pid"], int) and isinstance(record["token"], str) and len(record["token"]) == 64:
            bytes.fromhex(record["token"])
            return record
    except (ValueError, KeyError, TypeError):
        pass
    raise IdentityError(f"its record {folder / _file(name)} is malformed")


def proof(token: str, name: str, nonce: str) -> str:
    """What only the holder of `token` can answer to `nonce` at the address `name`."""
    message = f"cuda-agent eval server\n{name}\n{nonce}".encode()
    return hmac.new(bytes.fromhex(token), message, hashlib.sha256).hexdigest()


def server_problem(sock: socket.socket, reader, folder: Path, name: str) -> str | None:
    """Why the peer of `sock` (connected to `name`) is not the server this user started, or None.
    The identity check goes over `sock`; `reader` is the buffered reader the answer is read with."""
    pid, uid = peer_credentials(sock)
    if uid != os.getuid():
        return f"it runs as uid {uid}, not as this user (uid {os.getuid()})"
    try:
        record = read_record(folder, name)
    except IdentityError as e:
        return str(e)
    if record["pid"] != pid:
        return f"it is pid {pid}, not the server this user started (pid {record['pid']}, maybe exited)"
    nonce = secrets.token_hex(16)
    try:
        sock.settimeout(HELLO_TIMEOUT_S)
        sock.sendall(json.dumps({"op": "hello", "nonce": nonce}).encode() + b"\n")
        line = reader.readline(MAX_HELLO)
    except TimeoutError:
        return f"it did not answer the identity check within {HELLO_TIMEOUT_S:g} s"
    except OSError as e:
        return f"the identity check failed: {e.strerror or e}"
    finally:
        sock.settimeout(None)
    try:
        hello = json.loads(line)
    except ValueError:
        hello = None
    if isinstance(hello, dict) and isinstance(hello.get("refused"), str):
        return f"it refused this client ({hello['refused']})"
    if not isinstance(hello, dict) or not isinstance(hello.get("proof"), str):
        return f"its answer to the identity check is malformed ({_excerpt(line)})"
    if not hmac.compare_digest(hello["proof"], proof(record["token"], name, nonce)):
        return "its proof of identity is wrong (it does not hold the server's token)"
    return None


def _owner_problem(st: os.stat_result) -> str | None:
    if st.st_uid != os.getuid():
        return f"is owned by uid {st.st_uid}, not this user (uid {os.getuid()}): remove it"
    if st.st_mode & 0o077:
        return f"is open to other users (mode {stat.S_IMODE(st.st_mode):o}): chmod go= it"
    return None


def _file(name: str) -> str:
    return name.lstrip("\0") + ".json"


def _excerpt(line: bytes) -> str:
    if not line:
        return "nothing, it hung up"
    ended = "" if line.endswith(b"\n") else ", no end of line"
    return f"{len(line)} bytes{ended}: {line[:60].decode('utf-8', 'replace').rstrip()!r}"
