"""The jail itself, attacked: each rule of cuda_agent/jail.py as a hostile command that would break
it. Runs wherever bubblewrap can start (CI installs it); skipped, saying why, elsewhere."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_agent.jail import Jail, jail_problem, minimal_env, thread_count

pytestmark = pytest.mark.skipif(jail_problem() is not None, reason=str(jail_problem()))


def run_py(code: str, jail: Jail, timeout: float = 60) -> subprocess.CompletedProcess:
    proc = jail.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_writes_only_to_its_scratch_folder(tmp_path):
    scratch, outside = tmp_path / "scratch", tmp_path / "records"
    scratch.mkdir()
    outside.mkdir()
    code = f"""
import os
open({str(scratch / 'ok')!r}, 'w').write('fine')
for target in [{str(outside / 'x')!r}, {str(Path.home() / '.cuda-agent-jail-probe')!r}, '/usr/x', '/etc/x']:
    try:
        open(target, 'w').write('escaped')
        print('WROTE', target)
    except OSError:
        pass
"""
    r = run_py(code, Jail(writable=[scratch]))
    assert r.returncode == 0, r.stderr
    assert "WROTE" not in r.stdout
    assert (scratch / "ok").read_text() == "fine"
    assert not (outside / "x").exists()
    assert not (Path.home() / ".cuda-agent-jail-probe").exists() and not Path("/etc/x").exists()


def test_the_folder_we_were_started_from_is_not_bound(tmp_path, monkeypatch):
    """`python -m cuda_agent.cli` puts its cwd first on sys.path: the jail bound it, so a run started in
    the home folder showed it all to the candidate, and one started in / covered the private /tmp and /dev
    with the host's (the judge then could not even open /dev/urandom). PYTHONPATH=/ likewise."""
    (tmp_path / "secret.txt").write_text("api key")
    monkeypatch.setattr(sys, "path", [str(tmp_path), "/", *sys.path[1:]])
    marker = f"cuda-agent-jail-{os.getpid()}-host"
    Path(f"/tmp/{marker}").write_text("host")
    code = f"""
import os
for p in [{str(tmp_path / 'secret.txt')!r}, '/tmp/{marker}']:
    try:
        print('READ', p, open(p).read())
    except OSError:
        pass
open('/dev/urandom', 'rb').read(4)
"""
    try:
        r = run_py(code, Jail())
    finally:
        Path(f"/tmp/{marker}").unlink()
    assert r.returncode == 0, r.stderr
    assert "READ" not in r.stdout


def test_tmp_and_dev_shm_are_private(tmp_path):
    marker = f"cuda-agent-jail-{os.getpid()}"
    code = f"open('/tmp/{marker}', 'w').write('x'); open('/dev/shm/{marker}', 'w').write('x')"
    r = run_py(code, Jail())
    assert r.returncode == 0, r.stderr
    assert not Path(f"/tmp/{marker}").exists() and not Path(f"/dev/shm/{marker}").exists()


def test_no_network_not_even_loopback_or_unix_sockets(tmp_path):
    """Loopback TCP of the host, and the host's unix sockets where they live (/tmp, /run): none is
    reachable. (A socket inside a folder bound into the jail would be: nothing of ours listens there.)"""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    sock_path = Path("/tmp") / f"cuda-agent-jail-test-{os.getpid()}.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(sock_path))
    unix.listen(1)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0cuda-agent-jail-test-{os.getpid()}")
    abstract.listen(1)
    code = f"""
import socket, glob
targets = [(socket.AF_INET, ('127.0.0.1', {port})), (socket.AF_UNIX, {str(sock_path)!r}),
           (socket.AF_UNIX, '\\0cuda-agent-jail-test-{os.getpid()}')]
targets += [(socket.AF_UNIX, p) for p in glob.glob('/run/**/*.sock', recursive=True) + glob.glob('/var/run/*.sock')]
for family, addr in targets:
    s = socket.socket(family)
    s.settimeout(2)
    try:
        s.connect(addr)
        print('CONNECTED', addr)
    except OSError:
        pass
"""
    try:
        r = run_py(code, Jail())
    finally:
        server.close()
        unix.close()
        abstract.close()
        sock_path.unlink(missing_ok=True)
    assert r.returncode == 0, r.stderr
    assert "CONNECTED" not in r.stdout


def test_no_view_of_or_signal_to_other_processes():
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    code = f"""
import os
print('PIDS', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))
for pid in ({os.getpid()}, {victim.pid}):
    try:
        os.kill(pid, 9)
        print('KILLED', pid)
    except OSError:
        pass
    try:
        open(f'/proc/{{pid}}/environ').read()
        print('READ ENV', pid)
    except OSError:
        pass
"""
    try:
        r = run_py(code, Jail())
        time.sleep(0.2)
        assert victim.poll() is None, "the jailed process killed a process outside"
    finally:
        victim.kill()
    assert r.returncode == 0, r.stderr
    assert "KILLED" not in r.stdout and "READ ENV" not in r.stdout
    pids = eval(r.stdout.split("PIDS", 1)[1].splitlines()[0])
    assert max(pids) < 100  # its own PID namespace: only its own few processes


def test_environment_is_an_allowlist(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    monkeypatch.setenv("DATABASE_URL", "postgres://admin:pw@db/x")
    monkeypatch.setenv("GH_PAT", "ghp_abcdefabcdef")
    r = run_py("import os; print(sorted(os.environ.items()))", Jail())
    assert r.returncode == 0, r.stderr
    for secret in ("sk-test-123", "admin:pw", "ghp_abcdefabcdef"):
        assert secret not in r.stdout
    assert {k: v for k, v in eval(r.stdout) if k != "PWD"}.items() <= minimal_env().items()


def test_no_capabilities_and_proc_sys_read_only():
    code = """
caps = [l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1]
print('CAPS', caps)
try:
    open('/proc/sys/kernel/hostname', 'w').write('x')
    print('WROTE PROC SYS')
except OSError:
    pass
"""
    r = run_py(code, Jail())
    assert r.returncode == 0, r.stderr
    assert "CAPS 0000000000000000" in r.stdout and "WROTE PROC SYS" not in r.stdout


def test_every_process_dies_with_the_jail_even_a_detached_one(tmp_path):
    """fork(); setsid(); exec sleep: it must not outlive the jail, killed as the evaluator kills it."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = f"""
import os, time
if os.fork() == 0:
    os.setsid()
    os.execvp('sleep', ['sleep', '300'])
open({str(scratch / 'started')!r}, 'w').write('x')
time.sleep(300)
"""
    proc = Jail(writable=[scratch]).popen([sys.executable, "-c", code])
    deadline = time.time() + 30
    while not (scratch / "started").exists() and time.time() < deadline:
        time.sleep(0.1)
    assert thread_count(proc.pid) >= 3  # bwrap, its init, python, sleep
    tree = _tree(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    time.sleep(0.5)
    alive = [p for p in tree if Path(f"/proc/{p}").exists() and "Z" not in _state(p)]
    assert not alive, f"left behind: {alive}"


def test_agent_killed_with_9_takes_its_jails_with_it(tmp_path):
    """The agent (here a stand-in process that started a jail) dies by SIGKILL: nothing it jailed lives on."""
    pid_file = tmp_path / "jail.pid"
    agent = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
from cuda_agent.jail import Jail
p = Jail().popen([sys.executable, '-c', 'import time; time.sleep(300)'])
open({str(pid_file)!r}, 'w').write(str(p.pid))
time.sleep(300)
"""])
    deadline = time.time() + 30
    while not pid_file.exists() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    tree = _tree(int(pid_file.read_text()))
    assert len(tree) >= 2
    agent.kill()
    agent.wait(10)
    deadline = time.time() + 10
    while time.time() < deadline:
        alive = [p for p in tree if Path(f"/proc/{p}").exists() and "Z" not in _state(p)]
        if not alive:
            break
        time.sleep(0.2)
    assert not alive, f"left behind after kill -9 of the agent: {alive}"


def _tree(pid: int) -> list[int]:
    from cuda_agent.jail import descendants

    return descendants(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_checkout_run_in_place_gives_its_jailed_workers_its_own_package(tmp_path):
    """`python -m cuda_agent.cli` in a checkout that is not the installed one: its judge and recorder
    (jailed, where only the package's own folder is bound) import that checkout's package too. They
    looked for the editable install's and died: "No module named cuda_agent"."""
    import json
    import shutil

    root = Path(__file__).resolve().parents[2]
    checkout = tmp_path / "checkout"
    shutil.copytree(root / "cuda_agent", checkout / "cuda_agent", ignore=shutil.ignore_patterns("__pycache__"))
    task = root / "tests" / "harness" / "cpu_task"
    env = {**os.environ, "CUDA_AGENT_EVAL__SERVER_IDLE_S": "0", "CUDA_AGENT_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "cuda_agent.cli", "eval", str(task / "model.py"), "--candidate",
                           str(task / "honest"), "--device", "cpu", "--no-compile-baseline", "--json"],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    verdict = json.loads(proc.stdout)["verdict"]
    assert verdict["status"] == "correct", verdict["error"]
