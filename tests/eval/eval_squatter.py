"""A process that binds an eval server's abstract address and answers as told: what another user,
another process of this user, or a broken server could do once the real server's name is free.
Standard library only (it may run as uid 65534, with -I -S).

    python eval_squatter.py NAME HELLO ANSWER [--record FILE] [--uid UID] [--forged JSON]

HELLO, the reply to the first line a client sends (its identity check): forge (the forged answer,
as a server of the old protocol would), fakeproof (a proof made without the token), garbage, half
(half a line, then hang up), huge (8 MiB on one line), silent (read, never answer), prove (the
right proof, with the token of the server record FILE: as the real server would). ANSWER, the
reply to the second line (the request): forge, malformed (a verdict of the wrong shape), half,
hangup. It prints "ready" once it listens.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import socket
import sys
import threading
import time


def reply(mode: str, conn: socket.socket, forged: bytes, record: str | None, name: str, line: bytes) -> bool:
    """Answer `line` as `mode` says; False: hang up."""
    if mode == "forge":
        conn.sendall(forged)
    elif mode == "fakeproof":
        conn.sendall(json.dumps({"proof": hashlib.sha256(line).hexdigest()}).encode() + b"\n")
    elif mode == "prove":
        nonce, token = json.loads(line)["nonce"], json.load(open(record))["token"]
        mac = hmac.new(bytes.fromhex(token), f"cuda-agent eval server\n{name}\n{nonce}".encode(), hashlib.sha256)
        conn.sendall(json.dumps({"proof": mac.hexdigest()}).encode() + b"\n")
    elif mode == "garbage":
        conn.sendall(b"\x00\xff\xfe not json at all \x1b[2J\n")
    elif mode == "half":
        conn.sendall(forged[: len(forged) // 2])
        return False
    elif mode == "huge":
        conn.sendall(b'{"proof": "' + b"a" * (8 << 20) + b'"}\n')
    elif mode == "malformed":
        conn.sendall(
            json.dumps(
                {"verdict": {"status": "perfect", "reward": "lots"}, "task": [], "name": 3, "server": None}
            ).encode()
            + b"\n"
        )
    elif mode == "silent":
        time.sleep(3600)
    elif mode == "hangup":
        return False
    return True


def serve_one(conn: socket.socket, a: argparse.Namespace, forged: bytes) -> None:
    with conn:
        reader = conn.makefile("rb")
        try:
            for mode in (a.hello, a.answer):
                line = reader.readline()
                if not line or not reply(mode, conn, forged, a.record, "\0" + a.name, line):
                    return
            reader.readline()
        except OSError:
            pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("name", help="the abstract address, without its leading NUL")
    ap.add_argument("hello")
    ap.add_argument("answer")
    ap.add_argument("--record")
    ap.add_argument("--uid", type=int)
    ap.add_argument("--forged", default="{}")
    a = ap.parse_args()
    if a.uid is not None:  # another user: needs root to become
        os.setgroups([])
        os.setgid(a.uid)
        os.setuid(a.uid)
    forged = a.forged.encode() + b"\n"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind("\0" + a.name)
    sock.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=serve_one, args=(conn, a, forged), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
