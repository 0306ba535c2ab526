"""What the unjailed side reads of files a jailed process or the model could have written, as
attacks (cuda_agent/untrusted_files.py). A recorder once replaced its own log with a symlink to
~/.aws/credentials and exited: the parent read the "last lines of the log" through it into the
verify observation, trajectory.jsonl and `export --format sft`; the same log made a FIFO hung the
agent. Every such read is of a regular file, opened without following a link (at its name or on
the way to it), non-blocking and capped; anything else is a one-line finding, never a hang."""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from cuda_agent.untrusted_files import UnreadableFile, open_regular, read_bytes, read_tail, read_text, tail_of_fd

CANARY = "AKIA-CANARY-7f3e9c21-do-not-leak"
TASK = Path(__file__).resolve().parents[1] / "harness" / "cpu_task"
TWO_GIB = 2 << 30


@pytest.fixture
def secret(tmp_path) -> Path:
    """A key file outside every folder the harness reads untrusted files from."""
    home = tmp_path / "home" / ".aws"
    home.mkdir(parents=True)
    (home / "credentials").write_text(f"[default]\naws_secret_access_key = {CANARY}\n")
    return home / "credentials"


@pytest.fixture
def scratch(tmp_path) -> Path:
    folder = tmp_path / "scratch"
    folder.mkdir()
    return folder


def _sparse(path: Path, size: int, tail: bytes = b"") -> Path:
    with open(path, "wb") as f:
        f.truncate(size - len(tail))
        f.seek(size - len(tail))
        f.write(tail)
    return path


def _no_canary(*texts: str) -> None:
    for text in texts:
        assert CANARY not in text and "aws_secret_access_key" not in text, text[:2000]


# -- the helper itself -------------------------------------------------------------------------


def test_a_regular_file_is_read_whole_or_by_its_tail(scratch):
    (scratch / "a" / "b").mkdir(parents=True)
    (scratch / "a" / "b" / "log").write_bytes(b"first\nsecond\nthird\n")
    path = scratch / "a" / "b" / "log"
    assert read_bytes(path, root=scratch, limit=100) == b"first\nsecond\nthird\n"
    assert read_text(path, root=scratch, limit=100) == "first\nsecond\nthird\n"
    assert read_tail(path, root=scratch, limit=6) == b"third\n"
    assert read_tail(path, root=scratch, limit=1000) == b"first\nsecond\nthird\n"
    (scratch / "empty").touch()
    assert read_bytes(scratch / "empty", root=scratch, limit=10) == b""


@pytest.mark.parametrize("target", ["absolute", "relative", "dangling-then-made", "to-a-folder", "chain"])
def test_a_symlink_in_the_files_place_is_never_followed(scratch, secret, target):
    log = scratch / "recorder.log"
    if target == "absolute":
        log.symlink_to(secret)
    elif target == "relative":
        log.symlink_to(os.path.relpath(secret, scratch))
    elif target == "dangling-then-made":  # a link made in the jail, where its target does not exist
        log.symlink_to(scratch.parent / "later")
        (scratch.parent / "later").write_text(CANARY)
    elif target == "to-a-folder":
        log.symlink_to(secret.parent)
    else:
        (scratch / "hop").symlink_to(secret)
        log.symlink_to("hop")
    for read in (
        lambda: read_bytes(log, root=scratch, limit=1 << 20, shown="the recorder's log"),
        lambda: read_tail(log, root=scratch, limit=1500, shown="the recorder's log"),
        lambda: os.close(open_regular(log, root=scratch, shown="the recorder's log")),
    ):
        with pytest.raises(UnreadableFile) as e:
            read()
        assert str(e.value) == "the recorder's log is not a regular file (a symlink): not read"
        assert not e.value.missing and "\n" not in str(e.value)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_symlinked_folder_on_the_way_is_never_followed(scratch, secret, depth):
    """Only the last name of the path is a link in neither place: a folder above it is the link."""
    real = secret.parent  # holds `credentials`
    parts = ["d1", "d2", "d3"][:depth]
    here = scratch
    for part in parts[:-1]:
        (here / part).mkdir()
        here = here / part
    (here / parts[-1]).symlink_to(real)
    path = here / parts[-1] / "credentials"
    with pytest.raises(UnreadableFile, match=f"{'/'.join(parts)} on the way to it is a symlink, not a folder"):
        read_bytes(path, root=scratch, limit=1 << 20)
    with pytest.raises(UnreadableFile, match="a symlink"):
        read_tail(path, root=scratch, limit=100)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("where", ["file", "tail", "open"])
def test_a_fifo_is_refused_at_once_never_waited_on(scratch, where):
    fifo = scratch / "recorder.log"
    os.mkfifo(fifo)
    read = {
        "file": lambda: read_bytes(fifo, root=scratch, limit=100),
        "tail": lambda: read_tail(fifo, root=scratch, limit=100),
        "open": lambda: open_regular(fifo, root=scratch),
    }[where]
    t0 = time.monotonic()
    with pytest.raises(UnreadableFile, match=r"is not a regular file \(a FIFO\): not read"):
        read()
    assert time.monotonic() - t0 < 2


@pytest.mark.timeout(10)
def test_a_folder_a_socket_and_a_missing_file_are_findings(scratch):
    (scratch / "log").mkdir()
    with pytest.raises(UnreadableFile, match=r"\(a folder\): not read"):
        read_bytes(scratch / "log", root=scratch, limit=100)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(scratch / "sock"))
        with pytest.raises(UnreadableFile, match="a socket"):
            read_bytes(scratch / "sock", root=scratch, limit=100)
    with pytest.raises(UnreadableFile) as e:
        read_bytes(scratch / "gone", root=scratch, limit=100)
    assert e.value.missing and e.value.errno == errno.ENOENT
    (scratch / "file").write_text("x")
    with pytest.raises(UnreadableFile, match="file on the way to it is a regular file, not a folder"):
        read_bytes(scratch / "file" / "below", root=scratch, limit=100)


@pytest.mark.timeout(10)
def test_a_2_gib_sparse_file_is_capped_fast(scratch):
    big = _sparse(scratch / "recorder.log", TWO_GIB, b"the last line\n")
    t0 = time.monotonic()
    with pytest.raises(UnreadableFile, match=r"2048.0 MiB, over the 1.0 MiB cap: not read"):
        read_bytes(big, root=scratch, limit=1 << 20)
    assert read_tail(big, root=scratch, limit=14) == b"the last line\n"
    assert len(read_tail(big, root=scratch, limit=4096)) == 4096
    assert time.monotonic() - t0 < 2


def test_paths_outside_root_or_climbing_out_are_the_callers_mistake(scratch, secret):
    with pytest.raises(ValueError):
        read_bytes(secret, root=scratch, limit=100)
    with pytest.raises(ValueError):
        read_bytes(scratch / ".." / "home" / ".aws" / "credentials", root=scratch, limit=100)


@pytest.mark.timeout(60)
def test_a_file_swapped_for_a_symlink_while_read_never_yields_the_target(scratch, secret):
    """A jailed process flips the name between a real log and a link, as fast as it can; every
    read gives the real content or a finding, never the key file (nothing is resolved twice)."""
    log, link, real = scratch / "recorder.log", scratch / ".link", scratch / ".real"
    real.write_text("real output\n")
    stop = threading.Event()

    steps = ((link, lambda: link.symlink_to(secret)), (real, lambda: real.write_text("real output\n")))

    def flip():
        while not stop.is_set():
            for src, make in steps:
                try:
                    make()
                    os.replace(src, log)
                except OSError:
                    pass

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    seen = {"real": 0, "refused": 0}
    try:
        for _ in range(3000):
            try:
                data = read_bytes(log, root=scratch, limit=1 << 20).decode()
            except UnreadableFile as e:
                _no_canary(str(e))
                seen["refused"] += 1
            else:
                _no_canary(data)
                assert data in ("real output\n", ""), data
                seen["real"] += 1
    finally:
        stop.set()
        flipper.join()
    assert seen["real"] and seen["refused"], seen  # both states were met


def test_a_descriptor_opened_before_the_child_keeps_reading_what_it_wrote(scratch, secret):
    """The channel's log: the parent's descriptor is the file the child wrote, whatever is put
    at the name later."""
    log = scratch / "judge.log"
    fd = os.open(log, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, b"Traceback: the judge's own output\n")
        log.unlink()
        log.symlink_to(secret)
        assert tail_of_fd(fd, 1500) == b"Traceback: the judge's own output\n"
        os.ftruncate(fd, TWO_GIB)  # and made huge (sparse): the tail within the cap, at once
        assert tail_of_fd(fd, 1500) == b"\0" * 1500
    finally:
        os.close(fd)


# -- the callers ----------------------------------------------------------------------------------


def _hostile_candidate(tmp_path: Path, prelude: str) -> Path:
    from hostile import hostile_copy  # tests/helpers

    return hostile_copy(TASK / "honest", tmp_path / "cand", prelude)


def _swap_log(kind: str, secret: Path) -> str:
    """model_new.py's prelude, run in the recorder (its cwd is its scratch folder, which holds its
    log): say something, put `kind` where the log was, exit."""
    make = {
        "symlink": f"_os.symlink({str(secret)!r}, 'recorder.log')",
        "fifo": "_os.mkfifo('recorder.log')",
        "folder": "_os.mkdir('recorder.log')",
        "sparse": "_f = open('recorder.log', 'wb'); _f.truncate(2 << 30); _f.close()",
    }[kind]
    return (
        "_os = torch.os\nprint('the recorder printed this', flush=True)\n"
        f"_os.remove('recorder.log')\n{make}\n_os._exit(3)\n"
    )


def _as_if_a_model():
    from cuda_agent.agent.scripted_model import ScriptedModel

    class AsIfAModel(ScriptedModel):
        """A script whose turns count as a model's (ScriptedModel marks its own, which exports skip):
        the attacker is the model, and its run must reach the sft export to be searched there."""

        def query(self, messages, tools):
            response = super().query(messages, tools)
            response.raw = {k: v for k, v in response.raw.items() if k != "injected"}
            return response

    return AsIfAModel


def _turn(*calls: tuple[str, dict]) -> dict:
    """One scripted model turn (agent/scripted_model.py) making these tool calls."""
    return {"content": "", "tool_calls": [{"name": name, "arguments": args} for name, args in calls]}


def _cpu_config(tmp_path: Path):
    from cuda_agent.eval.settings import EvalConfig
    from cuda_agent.jail import jail_problem

    return EvalConfig(
        device="cpu", n_sets=1, baselines=[], timeout_s=60, cache_dir=tmp_path / "cache", sandbox=jail_problem() is None
    )


@pytest.mark.timeout(300)
def test_the_recorders_log_swapped_in_the_jail_never_reaches_the_verdict(tmp_path, secret):
    """The review's attack on the evaluator, each way the log can be replaced: the verdict carries
    what the recorder really printed (read through the parent's descriptor), never the key file,
    and the evaluation ends (no hang on the FIFO, no 2 GiB read)."""
    from cuda_agent.eval.evaluator import Evaluator
    from cuda_agent.task import load_task

    with Evaluator(load_task(str(TASK / "model.py")), _cpu_config(tmp_path), ahead="none") as ev:
        for kind in ("symlink", "fifo", "folder", "sparse"):
            cand = _hostile_candidate(tmp_path / kind, _swap_log(kind, secret))
            t0 = time.monotonic()
            v = ev.evaluate(cand)
            assert time.monotonic() - t0 < 120
            _no_canary(v.model_dump_json())
            assert v.status == "runtime_error", (kind, v.status, v.error)
            assert "the recorder died while loading model_new.py (exit code 3)" in v.error, v.error
            assert "the recorder printed this" in v.error, v.error  # its real output, through the parent's fd


@pytest.mark.timeout(600)
def test_the_attack_through_the_agent_leaves_no_secret_in_observation_trajectory_or_export(tmp_path, secret):
    """The same attack as a model makes it: model_new.py written with the file tools, then verify;
    the observation, trajectory.jsonl and an sft export are searched for the key."""
    from cuda_agent.agent.loop import Agent, AgentConfig
    from cuda_agent.environment import Environment
    from cuda_agent.task import load_task
    from cuda_agent.train.export import export
    from cuda_agent.trajectory import TrajectoryWriter, read_trajectory

    source = (
        (TASK / "honest" / "model_new.py")
        .read_text()
        .replace(
            "kernels = kernel_runtime.load_kernels()",
            "kernels = kernel_runtime.load_kernels()\n" + _swap_log("symlink", secret),
        )
    )
    kernel = (TASK / "honest" / "kernels" / "scale_add.cu").read_text()
    write = _turn(
        ("edit_file", dict(mode="create", path="kernels/scale_add.cu", file_text=kernel)),
        ("edit_file", dict(mode="create", path="model_new.py", overwrite=True, file_text=source)),
    )
    script = [write, _turn(("verify", {})), _turn(("finish", {"summary": "done"}))]
    env = Environment.create(
        load_task(str(TASK / "model.py")), runs_dir=tmp_path / "runs", eval_config=_cpu_config(tmp_path)
    )
    path = env.workspace.root.parent / "trajectory.jsonl"
    with env, TrajectoryWriter(path) as writer:
        Agent(_as_if_a_model()(script), env, AgentConfig(), writer).run()
    shown = next(r for r in read_trajectory(path) if r.type == "tool_result" and r.name == "verify").observation
    out = tmp_path / "sft.jsonl"
    report = export([path.parent], "sft", out, include_unfinished=True)
    assert report.written == 1, report
    _no_canary(shown, path.read_text(), out.read_text())
    assert "the recorder died while loading model_new.py" in shown and "the recorder printed this" in shown, shown


@pytest.mark.timeout(120)
@pytest.mark.parametrize("named", ["fifo", "sub/fifo"])
def test_a_line_directive_citing_a_fifo_does_not_hang_the_compile_errors(tmp_path, named):
    """`#line 1 "../fifo"` makes nvcc cite any name of the candidate; its errors quote the cited line,
    read in the parent: a FIFO there hung it. (A FIFO inside kernels/ is refused before nvcc runs:
    source_tree.py; one beside kernels/ is still reachable by name.)"""
    from cuda_agent.kernels.build import build_kernels

    cand = tmp_path / "cand"
    fifo = cand / named
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    rel = "../" + fifo.relative_to(cand).as_posix()
    (cand / "kernels").mkdir()
    (cand / "kernels" / "bad.cu").write_text(f'#line 1 "{rel}"\nthis is not C++;\n')
    r = build_kernels(cand / "kernels", tmp_path / "cache")
    assert not r.ok
    assert f"{named}:1: error" in r.errors and "is not a regular file (a FIFO): not read" in r.errors, r.errors


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "sparse"])
def test_a_source_that_is_a_fifo_or_huge_is_a_build_error_not_a_hang(tmp_path, kind):
    from cuda_agent.kernels.build import build_kernels

    kernels = tmp_path / "cand" / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "ok.cu").write_text((TASK / "honest" / "kernels" / "scale_add.cu").read_text())
    if kind == "fifo":
        os.mkfifo(kernels / "a.cu")
    else:
        _sparse(kernels / "a.cu", TWO_GIB)
    r = build_kernels(kernels, tmp_path / "cache")
    assert not r.ok and "kernels/a.cu" in r.errors, r.errors
    assert ("(a FIFO): not read" if kind == "fifo" else "over the 8.0 MiB cap") in r.errors, r.errors


@pytest.mark.timeout(60)
def test_the_static_guards_report_a_fifo_source_and_go_on(tmp_path):
    import shutil

    from cuda_agent.eval.guards.static import check_candidate_static

    cand = tmp_path / "cand"
    shutil.copytree(TASK / "honest", cand, ignore=shutil.ignore_patterns("__pycache__"))
    os.mkfifo(cand / "kernels" / "trap.cuh")
    findings = check_candidate_static(cand, task_fp32=True)
    assert any(f.where == "kernels/trap.cuh" and "(a FIFO): not read" in f.message for f in findings), findings


@pytest.mark.parametrize("how", ["symlink", "linked-parent"])
def test_a_view_file_read_refuses_a_link_made_after_its_path_was_resolved(tmp_path, secret, how):
    """view_file resolves the path first (no link may leave the workspace), then reads: a link
    the shell puts in between is refused, never followed."""
    from cuda_agent.tools.base import ToolError
    from cuda_agent.tools.file_text import read_text as tool_read

    ws = tmp_path / "ws"
    (ws / "kernels").mkdir(parents=True)
    resolved = (ws / "kernels" / "a.cu").resolve()
    if how == "symlink":
        resolved.symlink_to(secret)
    else:  # kernels/ itself became a link to the key's folder, which holds a.cu
        (secret.parent / "a.cu").write_text(CANARY)
        (ws / "kernels").rmdir()
        (ws / "kernels").symlink_to(secret.parent)
    with pytest.raises(ToolError) as e:
        tool_read(resolved, "kernels/a.cu")
    assert "symlink" in str(e.value)
    _no_canary(str(e.value))


@pytest.mark.timeout(30)
def test_protected_files_swapped_for_huge_or_linked_ones_count_as_changed(tmp_path, monkeypatch):
    from cuda_agent.task import load_task
    from cuda_agent.workspace import Workspace

    empty = tmp_path / "gitconfig"
    empty.touch()
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    ws = Workspace.create(load_task(str(TASK / "model.py")), runs_dir=tmp_path / "runs")
    assert ws.changed_protected() == []
    _sparse(ws.root / "model.py", TWO_GIB)  # a read of it whole would take the parent's memory
    meta = ws.root / ".cuda-agent"
    elsewhere = tmp_path / "elsewhere"
    meta.rename(elsewhere)
    meta.symlink_to(elsewhere)  # the same record, behind a linked folder
    t0 = time.monotonic()
    assert sorted(ws.changed_protected()) == [".cuda-agent/workspace.json", "model.py"]
    assert time.monotonic() - t0 < 5


@pytest.mark.timeout(30)
def test_a_run_folders_trajectory_in_a_links_or_a_fifos_place_is_not_read(tmp_path, secret):
    """export, resume and the app's follower read trajectory.jsonl as untrusted_files says."""
    from cuda_agent.agent.resume import ResumeError, resume_run
    from cuda_agent.follow import read_new_lines
    from cuda_agent.train.export import export
    from cuda_agent.trajectory import read_trajectory

    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    planted = tmp_path / "planted.jsonl"  # a trajectory-looking file holding the key
    planted.write_text(json.dumps({"type": "user", "step": 0, "content": CANARY}) + "\n")
    (run / "trajectory.jsonl").symlink_to(planted)
    with pytest.raises(UnreadableFile, match="a symlink"):
        read_trajectory(run / "trajectory.jsonl")
    with pytest.raises(ResumeError, match="a symlink"):
        resume_run(run)
    out = tmp_path / "sft.jsonl"
    report = export([run], "sft", out, include_unfinished=True)
    assert report.written == 0 and any("unreadable trajectory" in k for k in report.skipped), report
    assert read_new_lines(run / "trajectory.jsonl", 0) == ([], 0)
    (run / "trajectory.jsonl").unlink()
    os.mkfifo(run / "trajectory.jsonl")
    assert read_new_lines(run / "trajectory.jsonl", 0) == ([], 0)
    with pytest.raises(UnreadableFile, match="a FIFO"):
        read_trajectory(run / "trajectory.jsonl")
    _no_canary(out.read_text() if out.exists() else "", json.dumps(report.skipped))


@pytest.mark.timeout(120)
def test_a_wrapped_run_that_prints_gigabytes_is_read_back_capped(tmp_path):
    """profile and sanitize read what the jailed run printed: at most MAX_CAPTURE of it."""
    from cuda_agent.jail import jail_problem
    from cuda_agent.profiling.runner import MAX_CAPTURE, run_wrapped

    ws = tmp_path / "ws"
    ws.mkdir()
    run = run_wrapped(
        ["/bin/sh", "-c", f"head -c {MAX_CAPTURE + (8 << 20)} /dev/zero; echo done >&2"],
        cwd=ws,
        timeout=60,
        sandbox=jail_problem() is None,
    )
    assert len(run.stdout) < MAX_CAPTURE + 100 and run.stdout.endswith("[output cut at 64 MiB]")
    assert run.stderr.strip() == "done"
