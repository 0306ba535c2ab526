"""kernels/ as the build meets it, attacked: a FIFO, a socket, a folder named x.cu, a huge sparse
file, a symlink out of the workspace, each where a source or an #include names it, or where no
source names it at all; each a one-line build error naming the file and what to do, at once, never
a hang (the jailed nvcc waited on a header made a FIFO until its 600 s timeout) nor a traceback.
The compile tool's show=ptx runs nvcc again, jailed, over the same check."""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

import pytest

from cuda_agent.kernels.build import build_kernels
from cuda_agent.kernels.listings import ptx_of
from cuda_agent.kernels.toolkit import ToolkitError, find_nvcc

pytestmark = pytest.mark.timeout(120)

HONEST = Path(__file__).resolve().parents[1] / "harness" / "cpu_task" / "honest" / "kernels" / "scale_add.cu"


@pytest.fixture
def kernels(tmp_path):
    try:
        find_nvcc()
    except ToolkitError as e:
        pytest.skip(str(e))
    k = tmp_path / "cand" / "kernels"
    k.mkdir(parents=True)
    (k / "impl.h").write_text("#define SCALE_ADD_OK 1\n")
    (k / "ok.cu").write_text('#include "impl.h"\n' + HONEST.read_text())
    return k


def _plant(kernels: Path, what: str, name: str) -> None:
    path = kernels / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    if what == "fifo":
        os.mkfifo(path)
    elif what == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))  # the socket file stays after the socket object goes
        s.close()
    elif what == "folder":
        path.mkdir()
    elif what == "huge":
        with open(path, "wb") as f:
            f.truncate(3 << 30)  # sparse: 3 GiB read, nothing on disk
    elif what == "symlink":
        path.symlink_to("/etc/passwd")


EXPECT = {
    "fifo": "is not a regular file (a FIFO): not read; nvcc would wait on it: delete it with delete_file",
    "socket": "is not a regular file (a socket): not read; nvcc would wait on it: delete it with delete_file",
    "folder": "is not a regular file (a folder): not read",
    "huge": "MiB, over the 8.0 MiB cap",
    "symlink": "is a symlink: kernels/ must hold the sources themselves",
}


@pytest.mark.parametrize("what", ["fifo", "socket", "folder", "huge", "symlink"])
@pytest.mark.parametrize("name", ["x.cu", "impl.h", "sub/deep/notes.txt"], ids=["source", "header", "unnamed"])
def test_what_is_not_a_source_file_is_a_one_line_build_error_at_once(kernels, what, name):
    if what == "folder" and name != "x.cu":
        pytest.skip("a folder is a folder anywhere but where a source is listed")
    first = build_kernels(kernels, kernels.parent / "cache")  # cached: the next build looks the header up
    assert first.ok, first.errors
    _plant(kernels, what, name)
    t = time.monotonic()
    r = build_kernels(kernels, kernels.parent / "cache")
    assert time.monotonic() - t < 20, "the build waited on it"
    assert not r.ok
    line = next((ln for ln in r.errors.splitlines() if f"kernels/{name}" in ln), None)
    assert line is not None, r.errors
    assert EXPECT[what] in line, line
    assert "Traceback" not in r.errors


@pytest.mark.parametrize("what", ["fifo", "huge"])
def test_show_ptx_after_a_header_was_swapped_refuses_it_at_once(kernels, what):
    r = build_kernels(kernels, kernels.parent / "cache")
    assert r.ok, r.errors
    _plant(kernels, what, "impl.h")  # between the build and the listing (the shell runs in between)
    t = time.monotonic()
    out = ptx_of(r, kernels, None)
    assert time.monotonic() - t < 20
    assert out.startswith("kernels/impl.h ") and EXPECT[what] in out.splitlines()[0], out


def test_show_ptx_runs_in_the_jail(kernels, tmp_path, monkeypatch):
    """nvcc -ptx read the candidate's sources unjailed: now it is nvcc_run's, as the build's is."""
    import cuda_agent.kernels.nvcc_run as nvcc_run

    calls = []
    real = nvcc_run.run_nvcc
    monkeypatch.setattr(nvcc_run, "run_nvcc", lambda argv, **kw: calls.append(argv) or real(argv, **kw))
    r = build_kernels(kernels, kernels.parent / "cache")
    ptx_of(r, kernels, None)
    assert any("-ptx" in argv for argv in calls)


def test_a_tree_of_too_many_entries_is_refused_not_walked_forever(kernels, monkeypatch):
    import cuda_agent.kernels.source_tree as source_tree

    monkeypatch.setattr(source_tree, "MAX_ENTRIES", 50)
    for i in range(60):
        (kernels / f"n{i}.h").write_text("")
    r = build_kernels(kernels, kernels.parent / "cache")
    assert not r.ok and "kernels/ holds over 50 files and folders" in r.errors
    shutil.rmtree(kernels.parent / "cache", ignore_errors=True)
