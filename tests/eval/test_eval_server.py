"""`cuda-agent eval`'s warm server (cuda_agent/eval/server.py) on the CPU's host-only kernels: the
same verdicts as an evaluation in the command's own process, a second eval that finds it warm, an
edited task that gets a new evaluator, a server that dies or idles out, attackers that try to
reach it from inside the jail or from another user namespace, and squatters at its address that
try to answer in its place (tests/eval/eval_squatter.py).

Every test runs beside other servers (other_servers): a warm server of an earlier eval, a squatter
at the address a plain `cuda-agent eval` of the test task uses, and as root another user's. Each
test has an address of its own: the address derives from the cache folder (server_env's)."""

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

from cuda_agent.eval.baselines import default_cache_dir
from cuda_agent.eval.server_address import address
from cuda_agent.eval.server_identity import publish, read_record, records_dir
from cuda_agent.jail import find_bwrap, jail_problem

TASK = Path(__file__).parents[1] / "harness" / "cpu_task"
SQUATTER = Path(__file__).parent / "eval_squatter.py"
FORGED = {
    "verdict": {
        "status": "correct",
        "correct": True,
        "reward": 3,
        "speedup_vs_eager": 50.0,
        "speedup_vs_compile": 50.0,
        "notes": ["FORGED"],
    },
    "task": {"path": "forged"},
    "name": "FORGED",
    "server": {"pid": 1, "evaluations": 1, "reused": True},
}
pytestmark = pytest.mark.skipif(jail_problem() is not None, reason=str(jail_problem()))


@pytest.fixture(scope="module", autouse=True)
def other_servers(tmp_path_factory):
    """What else may run on the machine: a warm server of an earlier eval (another task, another
    cache), a process of this user squatting the address a plain `cuda-agent eval` of the test task
    uses from this environment (the shared default) that answers every line with a forged verdict,
    and, as root, a squatter of another uid. Yields their pids; the last test checks that they are
    still alive and that no test asked the warm one anything."""
    base = tmp_path_factory.mktemp("other-servers")
    task = base / "task"
    shutil.copytree(TASK, task, ignore=shutil.ignore_patterns("__pycache__"))
    env = {
        **os.environ,
        "CUDA_AGENT_CACHE": str(base / "cache"),
        "CUDA_AGENT_EVAL__SERVER_IDLE_S": "900",
        "CUDA_AGENT_EVAL__DEVICE": "cpu",
    }
    rc, out, err = evaluate(task / "model.py", task / "honest", env=env)
    assert rc == 0 and out["server"], err
    default = address("cpu", str((TASK / "model.py").resolve()), None, records_dir(default_cache_dir().resolve()))
    squatters = [squat(default[1:], "forge", "forge")]
    if os.getuid() == 0:
        squatters.append(squat(f"cuda-agent-eval-65534-cpu-{os.getpid()}", "forge", "forge", "--uid", "65534"))
    yield {
        "warm": out["server"]["pid"],
        "log": base / "cache" / "eval-server.log",
        "squatters": [s.pid for s in squatters],
    }
    for pid in [out["server"]["pid"], *(s.pid for s in squatters)]:
        _stop(pid)
    for s in squatters:
        s.wait(10)


@pytest.fixture
def server_env(monkeypatch, tmp_path):
    """The tests' own settings with the server on, and their own server namespace (the cache, which
    the address derives from); whatever server they start is killed at the end."""
    monkeypatch.setenv("CUDA_AGENT_EVAL__SERVER_IDLE_S", "120")
    monkeypatch.setenv("CUDA_AGENT_EVAL__DEVICE", "cpu")
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "cache"))
    yield
    for pid in _server_pids(tmp_path / "cache"):
        _stop(pid)


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def _records() -> Path:
    return records_dir(Path(os.environ["CUDA_AGENT_CACHE"]).resolve())


def _record() -> Path:
    return _records() / (_name()[1:] + ".json")


def _name(task: Path = TASK / "model.py") -> str:
    """The address the command uses for `task` in this test's namespace (server_env)."""
    return address("cpu", str(task.resolve()), None, _records())


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
    return (
        [int(line.split("pid ")[1].split("]")[0]) for line in log.read_text().splitlines() if "serving" in line]
        if log.is_file()
        else []
    )


def squat(name: str, hello: str, answer: str, *flags: str) -> subprocess.Popen:
    """A squatter process at the abstract address `name` (without its NUL), listening once this returns."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", str(SQUATTER), name, hello, answer, "--forged", json.dumps(FORGED), *flags],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready", f"the squatter did not start (exit {proc.wait(10)})"
    return proc


@pytest.fixture
def squatter(server_env):
    """squatter(hello, answer, *flags): a squatter at this test's address, stopped at the end."""
    procs = []

    def start(hello: str, answer: str, *flags: str) -> subprocess.Popen:
        procs.append(squat(_name()[1:], hello, answer, *flags))
        return procs[-1]

    yield start
    for p in procs:
        p.kill()
        p.wait(10)


def evaluate(task: Path, candidate: str | Path, *flags: str, env: dict | None = None) -> tuple[int, dict, str]:
    cand = candidate if isinstance(candidate, Path) else TASK / candidate
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuda_agent.cli",
            "eval",
            str(task),
            "--candidate",
            str(cand),
            "--no-compile-baseline",
            "--json",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env or os.environ.copy(),
    )
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


def evaluated_here(rc: int, out: dict, err: str, why: str) -> None:
    """The command ignored the answer at its address: the honest candidate's own verdict, evaluated
    in its process, and one line on stderr that says `why`; no traceback, nothing forged."""
    assert rc == 0 and out["verdict"]["status"] == "correct" and out["server"] is None, err
    assert "FORGED" not in json.dumps(out) and out["verdict"]["reward"] != 3 and "Traceback" not in err, err
    said = [line for line in err.splitlines() if "evaluating in this process" in line]
    assert len(said) == 1 and why in said[0], err


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


def test_a_server_that_ends_without_answering_leaves_the_command_to_evaluate(squatter):
    """A server that proves who it is and hangs up at the request, as one that crashed mid-request would."""
    proc = squatter("prove", "hangup", "--record", str(_record()))
    publish(_records(), _name(), proc.pid)
    evaluated_here(*evaluate(TASK / "model.py", "honest"), "ended without an answer")


def test_an_idle_server_exits(server_env, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_AGENT_EVAL__SERVER_IDLE_S", "3")
    rc, out, _ = evaluate(TASK / "model.py", "honest")
    assert rc == 0 and out["server"]["pid"]
    deadline = time.monotonic() + 60
    while _alive(out["server"]["pid"]) and time.monotonic() < deadline:  # a connection would count as use
        time.sleep(0.5)
    assert _connect() is None and not _record().exists()  # it took its record with it
    assert "idle for 3 s: exiting" in (tmp_path / "cache" / "eval-server.log").read_text()


PRELUDE = """
import json, socket
# the test's own server, and (in the jail) every eval server this network namespace lists
names = [{address!r}]
if {every}:
    names += [line.split()[-1].lstrip("@") for line in open("/proc/net/unix").read().splitlines()[1:]
              if line.split()[-1].startswith("@cuda-agent-eval")]
for name in names:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect("\\0" + name)
    except OSError:
        continue
    answers = s.makefile("rb")
    s.sendall(b'{{"op": "hello", "nonce": "n"}}\\n')  # the server proves itself to anyone it serves
    answers.readline()
    s.sendall(json.dumps({{"op": "evaluate", "task": {task!r}, "inputs": None, "candidate": {escape!r},
                          "cfg": {{"device": "cpu", "sandbox": False, "baselines": ["eager"]}}}}).encode() + b"\\n")
    answers.readline()
    raise RuntimeError("reached the eval server")
"""


def test_a_candidate_in_the_jail_cannot_reach_the_server(server_env, tmp_path):
    """A candidate that reached it would ask for an evaluation of its own with the jail off: here one
    whose import writes a file outside. Run without the jail, the same attack does reach it: the
    control aims at this test's server alone (any other server, another user's or another task's,
    would refuse or answer otherwise, and must not be asked), the jailed attack at every server too."""
    from cuda_agent.eval.evaluator import Evaluator
    from cuda_agent.eval.settings import EvalConfig
    from cuda_agent.task import load_task

    assert evaluate(TASK / "model.py", "honest")[0] == 0  # the server is up
    name = _name()  # before the Evaluator here runs: it sets TORCHINDUCTOR_CACHE_DIR, which the fingerprint reads
    marker = tmp_path / "escaped"
    escape = tmp_path / "escape"
    shutil.copytree(TASK / "honest", escape, ignore=shutil.ignore_patterns("__pycache__"))
    src = (escape / "model_new.py").read_text()
    writes = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('out of the jail')\n"
    (escape / "model_new.py").write_text(writes + src)
    verdicts = {}
    for sandbox in (True, False):
        hostile = tmp_path / f"hostile-{sandbox}"
        shutil.copytree(TASK / "honest", hostile, ignore=shutil.ignore_patterns("__pycache__"))
        prelude = PRELUDE.format(
            address=name[1:], every=sandbox, task=str((TASK / "model.py").resolve()), escape=str(escape)
        )
        (hostile / "model_new.py").write_text(
            src.replace(
                "kernels = kernel_runtime.load_kernels()", "kernels = kernel_runtime.load_kernels()\n" + prelude
            )
        )
        cfg = EvalConfig(device="cpu", n_sets=1, baselines=[], timeout_s=120, cache_dir=tmp_path / "c", sandbox=sandbox)
        with Evaluator(load_task(str(TASK / "model.py")), cfg, ahead="none") as ev:
            verdicts[sandbox] = (ev.evaluate(hostile), marker.exists())
    jailed, escaped = verdicts[True]
    # it ran (its import of socket is a static finding, which does not stop an evaluation), and got nowhere
    assert jailed.sets and jailed.sets[0].ok and "reached" not in (jailed.error or "") and not escaped, jailed.error
    unjailed, escaped = verdicts[False]  # the control: the attack works where nothing stops it
    assert "reached the eval server" in (unjailed.error or "") and escaped, unjailed.error


def test_a_peer_in_another_user_namespace_is_refused(server_env):
    """Same machine, same network namespace, same uid outside: still not served."""
    rc, _, _ = evaluate(TASK / "model.py", "honest")
    assert rc == 0
    code = f"""
import socket
s = socket.socket(socket.AF_UNIX)
s.connect({_name()!r})
refusal = s.recv(4096).decode()  # a refused peer is told at once, then the server hangs up
try:  # the request after it is never served: the send fails, or nothing comes back
    s.sendall(b'{{"op": "evaluate"}}\\n')
    after = s.recv(4096)
except OSError:
    after = b""
assert after == b"", after
print(refusal)
"""
    proc = subprocess.run(
        [find_bwrap(), "--unshare-user", "--dev-bind", "/", "/", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "another user namespace" in json.loads(proc.stdout)["refused"]


# squatters at the address: what answers there once the real server's name is free (or before it had one)


def test_a_squatter_that_forges_a_verdict_is_not_believed(squatter):
    """The issue's attack: a process at the address (no server was ever started here) answers every
    line with a verdict of reward 3 and 50x. The command evaluates itself, and says so in one line."""
    squatter("forge", "forge")
    evaluated_here(*evaluate(TASK / "model.py", "honest"), "this user started no server there")


def test_a_squatter_at_a_dead_servers_address_is_not_believed(server_env, squatter):
    """The server was killed (its record stays behind, naming its pid); a squatter binds the freed
    name and makes up a proof."""
    rc, out, err = evaluate(TASK / "model.py", "honest")
    assert rc == 0 and out["server"], err
    os.kill(out["server"]["pid"], signal.SIGKILL)
    _wait_dead(out["server"]["pid"])
    assert read_record(_records(), _name())["pid"] == out["server"]["pid"]
    squatter("fakeproof", "forge")
    dead = out["server"]["pid"]
    evaluated_here(*evaluate(TASK / "model.py", "honest"), f"not the server this user started (pid {dead}")


def test_the_stale_address_of_a_dead_server_gets_a_new_server(server_env):
    """Killed, a server leaves its record and no listener: the next eval starts a server that
    replaces the record, and is believed."""
    _, first, _ = evaluate(TASK / "model.py", "honest")
    os.kill(first["server"]["pid"], signal.SIGKILL)
    _wait_dead(first["server"]["pid"])
    rc, second, err = evaluate(TASK / "model.py", "honest")
    assert rc == 0 and second["verdict"]["status"] == "correct" and "eval server started" in err, err
    assert second["server"]["pid"] != first["server"]["pid"]
    assert read_record(_records(), _name())["pid"] == second["server"]["pid"]


@pytest.mark.parametrize(
    "hello, why",
    [
        ("fakeproof", "its proof of identity is wrong"),
        ("silent", "it did not answer the identity check within 10 s"),
    ],
)
def test_a_squatter_with_the_recorded_pid_but_not_the_token_is_not_believed(squatter, hello, why):
    """The record names the squatter's pid (a pid reused over a stale record): the kernel's word on
    the peer passes, the proof of the token does not, or never comes."""
    proc = squatter(hello, "forge")
    publish(_records(), _name(), proc.pid)
    evaluated_here(*evaluate(TASK / "model.py", "honest"), why)


def test_the_server_answering_a_malformed_verdict_is_not_a_traceback(squatter):
    """Even a server that proves itself (holds the token) is believed only with an answer of the
    right shape: the issue's pydantic traceback, as one line."""
    proc = squatter("prove", "malformed", "--record", str(_record()))
    publish(_records(), _name(), proc.pid)
    evaluated_here(*evaluate(TASK / "model.py", "honest"), "answer is malformed (its verdict does not validate")


@pytest.mark.skipif(os.getuid() != 0, reason="another uid's squatter needs root to set up")
def test_another_users_squatter_is_not_believed(squatter):
    """Another uid at the address, named by the record (so the uid alone must stop it)."""
    proc = squatter("forge", "forge", "--uid", "65534")
    publish(_records(), _name(), proc.pid)
    evaluated_here(*evaluate(TASK / "model.py", "honest"), "it runs as uid 65534, not as this user")


@pytest.mark.parametrize(
    "hello, answer, why",
    [
        ("forge", "forge", "its answer to the identity check is malformed"),
        ("garbage", "forge", "its answer to the identity check is malformed"),
        ("half", "forge", "no end of line"),
        ("huge", "forge", "4096 bytes, no end of line"),
        ("prove", "half", "the eval server's answer is malformed (it ended after"),
        ("prove", "hangup", "the eval server ended without an answer"),
        ("prove", "malformed", "its verdict does not validate"),
    ],
)
def test_bad_answers_are_one_line_and_no_answer(squatter, tmp_path, hello, answer, why):
    """The same checks, quicker: the client alone (server_client.evaluate), on every kind of bad answer."""
    proc = squatter(hello, answer, "--record", str(_record()))
    publish(_records(), _name(), proc.pid)
    said = _ask_directly(tmp_path)
    assert len(said) == 1 and why in said[0] and said[0].endswith("evaluating in this process"), said


@pytest.mark.parametrize(
    "tamper, why",
    [
        ("folder mode", "record folder {folder} is open to other users (mode 755): chmod go= it"),
        ("folder symlink", "record folder {folder} is a symlink or not a folder"),
        ("record mode", "is open to other users (mode 644)"),
        ("record symlink", "cannot be opened (Too many levels of symbolic links)"),
        ("record fifo", "is not a regular file"),
    ],
)
def test_a_record_that_others_could_have_written_is_not_trusted(squatter, tmp_path, tamper, why):
    """The record and its folder are read only as this user alone could have written them: a
    server that proves itself with them is still not believed."""
    folder = _records()
    proc = squatter("prove", "forge", "--record", str(_record()))
    publish(folder, _name(), proc.pid)
    if tamper == "folder mode":
        folder.chmod(0o755)
    elif tamper == "folder symlink":
        folder.rename(folder.with_name("elsewhere"))
        folder.symlink_to(folder.with_name("elsewhere"))
    elif tamper == "record mode":
        _record().chmod(0o644)
    else:
        real = folder / "real.json"
        _record().rename(real)
        if tamper == "record symlink":
            _record().symlink_to(real)
        else:
            os.mkfifo(_record(), 0o600)
    said = _ask_directly(tmp_path)
    assert len(said) == 1 and why.format(folder=folder) in said[0], said


def test_the_other_servers_outlived_the_tests_and_were_never_asked(other_servers):
    """Nothing above used the warm server of an earlier eval or the squatters beside it, or stopped them."""
    assert all(_alive(pid) for pid in [other_servers["warm"], *other_servers["squatters"]])
    assert other_servers["log"].read_text().count("answered:") == 1  # the fixture's own eval


def _ask_directly(tmp_path: Path) -> list[str]:
    """What server_client.evaluate says when it asks the address of this test's task: its answer
    must be None (evaluate here), and no server may be started (the squatter holds the address)."""
    from cuda_agent.eval import server_client
    from cuda_agent.eval.settings import EvalConfig

    cfg = EvalConfig(device="cpu", cache_dir=Path(os.environ["CUDA_AGENT_CACHE"]).resolve(), server_idle_s=120)
    request = {
        "op": "evaluate",
        "task": str((TASK / "model.py").resolve()),
        "inputs": None,
        "cfg": cfg.model_dump(mode="json"),
        "candidate": str(TASK / "honest"),
    }
    said: list[str] = []
    answer = server_client.evaluate(cfg, request, said.append, before_start=lambda: pytest.fail("started a server"))
    assert answer is None, answer
    return said


def _wait_dead(pid: int) -> None:
    """Until the killed server at this test's address is gone, and its address free: a child it was
    starting (a spare recorder or judge) holds the listening socket until that child's exec."""
    deadline = time.monotonic() + 30
    while (_alive(pid) or _listed(_name())) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid) and not _listed(_name())


def _listed(name: str) -> bool:
    return any(line.endswith(" @" + name[1:]) for line in Path("/proc/net/unix").read_text().splitlines())
