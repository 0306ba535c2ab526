"""`cuda-agent eval`'s warm server (cuda_agent/eval/server.py) on the CPU's host-only kernels: the
same verdicts as an evaluation in the command's own process, a second eval that finds it warm, an
edited task that gets a new evaluator, a server that dies or idles out, and attackers that try to
reach it from inside the jail or from another user namespace."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_agent.eval.server_address import address
from cuda_agent.jail import find_bwrap, jail_problem

TASK = Path(__file__).parents[1] / "harness" / "cpu_task"
pytestmark = pytest.mark.skipif(jail_problem() is not None, reason=str(jail_problem()))


@pytest.fixture
def server_env(monkeypatch, tmp_path):
    """The tests' own settings with the server on; whatever server they start is killed at the end.
    The fingerprint reads this process's environment, so address("cpu") here is the command's."""
    monkeypatch.setenv("CUDA_AGENT_EVAL__SERVER_IDLE_S", "120")
    monkeypatch.setenv("CUDA_AGENT_EVAL__DEVICE", "cpu")
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "cache"))
    yield
    for pid in _server_pids(tmp_path / "cache"):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def _name(task: Path = TASK / "model.py") -> str:
    return address("cpu", str(task.resolve()), None)


def _connect() -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(_name())
        return s
    except OSError:
        s.close()
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").is_dir() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def _server_pids(cache: Path) -> list[int]:
    log = cache / "eval-server.log"
    return [int(line.split("pid ")[1].split("]")[0]) for line in log.read_text().splitlines() if "serving" in line] \
        if log.is_file() else []


def evaluate(task: Path, candidate: str | Path, *flags: str) -> tuple[int, dict, str]:
    cand = candidate if isinstance(candidate, Path) else TASK / candidate
    proc = subprocess.run([sys.executable, "-m", "cuda_agent.cli", "eval", str(task), "--candidate", str(cand),
                           "--no-compile-baseline", "--json", *flags], capture_output=True, text=True, timeout=300,
                          env=os.environ.copy())
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


def test_a_second_eval_finds_the_server_warm_and_verdicts_match_in_process_ones(server_env):
    rc, first, err = evaluate(TASK / "model.py", "honest")
    assert rc == 0 and first["verdict"]["status"] == "correct", err
    assert "eval server started" in err and first["server"]["reused"] is False
    pid = first["server"]["pid"]
    for name, status, code in (("honest", "correct", 0), ("wrong", "incorrect", 1), ("crash", "runtime_error", 4)):
        rc, out, err = evaluate(TASK / "model.py", name)
        assert (rc, out["verdict"]["status"]) == (code, status), err
        assert out["server"]["pid"] == pid and out["server"]["reused"] is True, out["server"]
        here = evaluate(TASK / "model.py", name, "--no-server")
        assert here[1]["server"] is None and (here[0], here[1]["verdict"]["status"]) == (code, status)
    # its recorder and judge were started and waited for after the last answer: this one waits for none
    rc, out, _ = evaluate(TASK / "model.py", "honest")
    assert out["server"]["evaluations"] == 5 and out["verdict"]["seconds"]["start_wait"] < 0.5


def test_an_edited_task_gets_a_server_of_its_own(server_env, tmp_path):
    """The task's module runs in the server (the reference): an edited task file is a new process,
    as it would be without a server; so is another task."""
    task = tmp_path / "task"
    shutil.copytree(TASK, task, ignore=shutil.ignore_patterns("__pycache__"))
    _, first, _ = evaluate(task / "model.py", task / "honest")
    (task / "model.py").write_text((task / "model.py").read_text() + "\n# edited\n")
    _, second, err = evaluate(task / "model.py", task / "honest")
    assert second["verdict"]["status"] == "correct" and "the task changed since this server loaded it" in err
    assert second["server"]["pid"] != first["server"]["pid"] and second["task"]["hash"] != first["task"]["hash"]
    assert not _alive(first["server"]["pid"])
    _, third, _ = evaluate(TASK / "model.py", task / "honest")  # the same source elsewhere: another task
    assert third["server"]["pid"] not in (first["server"]["pid"], second["server"]["pid"])
    _, fourth, _ = evaluate(task / "model.py", task / "honest", "--sets", "2")  # other settings, same task
    assert fourth["server"]["pid"] == second["server"]["pid"] and fourth["server"]["reused"] is False
    rc, out, err = evaluate(tmp_path / "missing.py", task / "honest")  # a bad path: one line, before any server
    assert rc == 2 and "task file not found" in err


def test_a_server_that_ends_without_answering_leaves_the_command_to_evaluate(server_env):
    """A server bound at the address that hangs up (as one that crashed mid-request would)."""
    fake = socket.socket(socket.AF_UNIX)
    fake.bind(_name())
    fake.listen(1)

    def hang_up():
        conn, _ = fake.accept()
        conn.recv(1 << 16)
        conn.close()

    import threading

    threading.Thread(target=hang_up, daemon=True).start()
    try:
        rc, out, err = evaluate(TASK / "model.py", "honest")
    finally:
        fake.close()
    assert rc == 0 and out["verdict"]["status"] == "correct" and out["server"] is None
    assert "ended without an answer" in err and "evaluating in this process" in err


def test_an_idle_server_exits(server_env, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_AGENT_EVAL__SERVER_IDLE_S", "3")
    rc, out, _ = evaluate(TASK / "model.py", "honest")
    assert rc == 0 and out["server"]["pid"]
    deadline = time.monotonic() + 60
    while _alive(out["server"]["pid"]) and time.monotonic() < deadline:  # a connection would count as use
        time.sleep(0.5)
    assert _connect() is None
    assert "idle for 3 s: exiting" in (tmp_path / "cache" / "eval-server.log").read_text()


PRELUDE = """
import json, socket
# every eval server this network namespace lists, and the one the parent's environment would name
names = [line.split()[-1] for line in open("/proc/net/unix").read().splitlines()[1:]
         if line.split()[-1].startswith("@cuda-agent-eval")] + [{address!r}]
for name in names:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect("\\0" + name.lstrip("@"))
    except OSError:
        continue
    s.sendall(json.dumps({{"op": "evaluate", "task": {task!r}, "inputs": None, "candidate": {escape!r},
                          "cfg": {{"device": "cpu", "sandbox": False, "baselines": ["eager"]}}}}).encode() + b"\\n")
    s.recv(1 << 20)
    raise RuntimeError("reached the eval server")
"""


def test_a_candidate_in_the_jail_cannot_reach_the_server(server_env, tmp_path):
    """A candidate that reached it would ask for an evaluation of its own with the jail off: here one
    whose import writes a file outside. Run without the jail, the same attack does reach it."""
    from cuda_agent.eval.evaluator import Evaluator
    from cuda_agent.eval.settings import EvalConfig
    from cuda_agent.task import load_task

    assert evaluate(TASK / "model.py", "honest")[0] == 0  # the server is up
    marker = tmp_path / "escaped"
    escape = tmp_path / "escape"
    shutil.copytree(TASK / "honest", escape, ignore=shutil.ignore_patterns("__pycache__"))
    src = (escape / "model_new.py").read_text()
    writes = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('out of the jail')\n"
    (escape / "model_new.py").write_text(writes + src)
    hostile = tmp_path / "hostile"
    shutil.copytree(TASK / "honest", hostile, ignore=shutil.ignore_patterns("__pycache__"))
    prelude = PRELUDE.format(address=_name()[1:], task=str(TASK / "model.py"), escape=str(escape))
    (hostile / "model_new.py").write_text(src.replace("kernels = kernel_runtime.load_kernels()",
                                                      "kernels = kernel_runtime.load_kernels()\n" + prelude))
    verdicts = {}
    for sandbox in (True, False):
        cfg = EvalConfig(device="cpu", n_sets=1, baselines=[], timeout_s=120, cache_dir=tmp_path / "c", sandbox=sandbox)
        with Evaluator(load_task(str(TASK / "model.py")), cfg, ahead="none") as ev:
            verdicts[sandbox] = (ev.evaluate(hostile), marker.exists())
    jailed, escaped = verdicts[True]
    # it ran (its import of socket is a static finding, which does not stop an evaluation), and got nowhere
    assert jailed.sets and jailed.sets[0].ok and "reached" not in (jailed.error or "") and not escaped, jailed.error
    unjailed, escaped = verdicts[False]  # the control: the attack works where nothing stops it
    assert "reached the eval server" in (unjailed.error or "") and escaped


def test_a_peer_in_another_user_namespace_is_refused(server_env):
    """Same machine, same network namespace, same uid outside: still not served."""
    rc, _, _ = evaluate(TASK / "model.py", "honest")
    assert rc == 0
    code = f"""
import socket
s = socket.socket(socket.AF_UNIX)
s.connect({_name()!r})
s.sendall(b'{{"op": "evaluate"}}\\n')
print(s.recv(4096).decode())
"""
    proc = subprocess.run([find_bwrap(), "--unshare-user", "--dev-bind", "/", "/", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "another user namespace" in json.loads(proc.stdout)["refused"]
