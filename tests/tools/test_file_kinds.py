"""view_file and edit_file on what is not a regular text file (the shell can make each): a FIFO, a
folder, a socket, a 3 GiB sparse file. Each is a prompt one-line refusal, never a read that waits
or a traceback; a create with overwrite replaces the entry itself, never writes through it."""

from __future__ import annotations

import os
import socket
import time

import pytest

from cuda_agent.tools.files import EditFile, ViewFile

pytestmark = pytest.mark.timeout(60)
view, edit = ViewFile(), EditFile()


def _plant(root, what: str, name: str = "kernels/odd.cu") -> None:
    path = root / name
    if what == "fifo":
        os.mkfifo(path)
    elif what == "folder":
        path.mkdir()
    elif what == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    elif what == "huge":
        with open(path, "wb") as f:
            f.truncate(3 << 30)


CALLS = [
    ("view", {"path": "kernels/odd.cu"}),
    ("replace", {"mode": "replace", "path": "kernels/odd.cu", "old_str": "a", "new_str": "b"}),
    ("insert", {"mode": "insert", "path": "kernels/odd.cu", "insert_line": 0, "new_str": "// x\n"}),
    ("create", {"mode": "create", "path": "kernels/odd.cu", "file_text": "// x\n"}),
]


@pytest.mark.parametrize("what", ["fifo", "folder", "socket", "huge"])
@pytest.mark.parametrize("call", CALLS, ids=[c[0] for c in CALLS])
def test_odd_files_are_refused_at_once_in_one_line(ctx, ws, what, call):
    _plant(ws.root, what)
    tool = view if call[0] == "view" else edit
    t = time.monotonic()
    r = tool.run(dict(call[1]), ctx)
    assert time.monotonic() - t < 10, "the tool waited on it"
    assert r.status == "error", r.observation
    assert len(r.observation.splitlines()) == 1 and "Traceback" not in r.observation, r.observation
    assert "odd.cu" in r.observation
    if call[0] != "create" and what in ("fifo", "socket"):  # it is there: "does not exist" sent the model astray
        assert f"is a {'FIFO' if what == 'fifo' else 'socket'}, not a text file: delete it" in r.observation


@pytest.mark.parametrize("what", ["fifo", "socket", "huge"])
def test_create_with_overwrite_replaces_the_entry_never_writes_through_it(ctx, ws, what):
    _plant(ws.root, what)
    r = edit.run({"mode": "create", "path": "kernels/odd.cu", "file_text": "// fresh\n", "overwrite": True}, ctx)
    assert r.status == "ok", r.observation
    path = ws.root / "kernels" / "odd.cu"
    assert path.is_file() and not path.is_symlink() and path.read_text() == "// fresh\n"
