"""The jail itself, attacked: each rule of cuda_agent/jail.py as a hostile command that would break
it. Runs wherever bubblewrap can start (CI installs it); skipped, saying why, elsewhere. Each attack
runs on the plain jail and, GPU-marked, on the judge's and the shell's as a GPU machine builds them
(tests/helpers/jails.py); the GPU's own attacks (its settings, its PCI device) are GPU-only."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jails import KINDS, make_jail

from cuda_agent.jail import Jail, jail_problem, minimal_env, thread_count

pytestmark = pytest.mark.skipif(jail_problem() is not None, reason=str(jail_problem()))


def run_py(code: str, jail: Jail, timeout: float = 60) -> subprocess.CompletedProcess:
    proc = jail.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("kind", KINDS)
def test_writes_only_to_its_scratch_folder(kind, tmp_path):
    scratch, outside = tmp_path / "scratch", tmp_path / "records"
    scratch.mkdir()
    outside.mkdir()
    code = f"""
import os
open({str(scratch / "ok")!r}, 'w').write('fine')
for target in [{str(outside / "x")!r}, {str(Path.home() / ".cuda-agent-jail-probe")!r}, '/usr/x', '/etc/x']:
    try:
        open(target, 'w').write('escaped')
        print('WROTE', target)
    except OSError:
        pass
"""
    r = run_py(code, make_jail(kind, scratch))
    assert r.returncode == 0, r.stderr
    assert "WROTE" not in r.stdout
    assert (scratch / "ok").read_text() == "fine"
    assert not (outside / "x").exists()
    assert not (Path.home() / ".cuda-agent-jail-probe").exists() and not Path("/etc/x").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_the_folder_we_were_started_from_is_not_bound(kind, tmp_path, monkeypatch):
    """`python -m cuda_agent.cli` puts its cwd first on sys.path: the jail bound it, so a run started in
    the home folder showed it all to the candidate, and one started in / covered the private /tmp and /dev
    with the host's (the judge then could not even open /dev/urandom). PYTHONPATH=/ likewise."""
    (tmp_path / "secret.txt").write_text("api key")
    monkeypatch.setattr(sys, "path", [str(tmp_path), "/", *sys.path[1:]])
    marker = f"cuda-agent-jail-{os.getpid()}-host"
    Path(f"/tmp/{marker}").write_text("host")
    code = f"""
import os
for p in [{str(tmp_path / "secret.txt")!r}, '/tmp/{marker}']:
    try:
        print('READ', p, open(p).read())
    except OSError:
        pass
open('/dev/urandom', 'rb').read(4)
"""
    try:
        r = run_py(code, make_jail(kind, _folder(tmp_path)))
    finally:
        Path(f"/tmp/{marker}").unlink()
    assert r.returncode == 0, r.stderr
    assert "READ" not in r.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_tmp_and_dev_shm_are_private(kind, tmp_path):
    marker = f"cuda-agent-jail-{os.getpid()}"
    code = f"open('/tmp/{marker}', 'w').write('x'); open('/dev/shm/{marker}', 'w').write('x')"
    r = run_py(code, make_jail(kind, _folder(tmp_path)))
    assert r.returncode == 0, r.stderr
    assert not Path(f"/tmp/{marker}").exists() and not Path(f"/dev/shm/{marker}").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_no_network_not_even_loopback_or_unix_sockets(kind, tmp_path):
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
        r = run_py(code, make_jail(kind, _folder(tmp_path)))
    finally:
        server.close()
        unix.close()
        abstract.close()
        sock_path.unlink(missing_ok=True)
    assert r.returncode == 0, r.stderr
    assert "CONNECTED" not in r.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_no_view_of_or_signal_to_other_processes(kind, tmp_path):
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
        r = run_py(code, make_jail(kind, _folder(tmp_path)))
        time.sleep(0.2)
        assert victim.poll() is None, "the jailed process killed a process outside"
    finally:
        victim.kill()
    assert r.returncode == 0, r.stderr
    assert "KILLED" not in r.stdout and "READ ENV" not in r.stdout
    pids = eval(r.stdout.split("PIDS", 1)[1].splitlines()[0])
    assert max(pids) < 100  # its own PID namespace: only its own few processes


@pytest.mark.parametrize("kind", KINDS)
def test_environment_is_an_allowlist(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    monkeypatch.setenv("DATABASE_URL", "postgres://admin:pw@db/x")
    monkeypatch.setenv("GH_PAT", "ghp_abcdefabcdef")
    r = run_py("import os; print(sorted(os.environ.items()))", make_jail(kind, _folder(tmp_path)))
    assert r.returncode == 0, r.stderr
    for secret in ("sk-test-123", "admin:pw", "ghp_abcdefabcdef"):
        assert secret not in r.stdout
    assert {k: v for k, v in eval(r.stdout) if k != "PWD"}.items() <= minimal_env().items()


@pytest.mark.parametrize("kind", KINDS)
def test_no_capabilities_and_proc_sys_read_only(kind, tmp_path):
    code = """
caps = [l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1]
print('CAPS', caps)
try:
    open('/proc/sys/kernel/hostname', 'w').write('x')
    print('WROTE PROC SYS')
except OSError:
    pass
"""
    r = run_py(code, make_jail(kind, _folder(tmp_path)))
    assert r.returncode == 0, r.stderr
    assert "CAPS 0000000000000000" in r.stdout and "WROTE PROC SYS" not in r.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_procfs_beyond_its_own_processes_is_read_only(kind, tmp_path):
    """Its uid maps to root outside when the agent runs as root: a /proc file of root's with a write
    bit (the NVIDIA driver's registry and suspend files, /proc/mtrr) would be its to write."""
    code = """
import os
found = []
for root, dirs, files in os.walk('/proc'):
    if root == '/proc':
        dirs[:] = [d for d in dirs if not d.isdigit() and d not in ('self', 'thread-self')]
    found += [os.path.join(root, f) for f in files if os.access(os.path.join(root, f), os.W_OK)]
print('WRITABLE', found)
"""
    r = run_py(code, make_jail(kind, _folder(tmp_path)))
    assert r.returncode == 0, r.stderr
    assert "WRITABLE []" in r.stdout, r.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_every_process_dies_with_the_jail_even_a_detached_one(kind, tmp_path):
    """fork(); setsid(); exec sleep: it must not outlive the jail, killed as the evaluator kills it."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = f"""
import os, time
if os.fork() == 0:
    os.setsid()
    os.execvp('sleep', ['sleep', '300'])
open({str(scratch / "started")!r}, 'w').write('x')
time.sleep(300)
"""
    proc = make_jail(kind, scratch).popen([sys.executable, "-c", code])
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


@pytest.mark.parametrize("kind", KINDS)
def test_agent_killed_with_9_takes_its_jails_with_it(kind, tmp_path):
    """The agent (here a stand-in process that started a jail) dies by SIGKILL: nothing it jailed lives on."""
    pid_file = tmp_path / "jail.pid"
    agent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).parents[1] / "helpers")!r})
from jails import make_jail
p = make_jail({kind!r}, {str(_folder(tmp_path))!r}).popen([sys.executable, '-c', 'import time; time.sleep(300)'])
open({str(pid_file)!r}, 'w').write(str(p.pid))
time.sleep(300)
""",
        ]
    )
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


GPU_KINDS = [pytest.param("judge", marks=pytest.mark.gpu), pytest.param("shell", marks=pytest.mark.gpu)]
# what bwrap's own /dev holds; in a GPU jail the NVIDIA nodes come on top, and nothing else
_STANDARD_DEV = {
    "core",
    "fd",
    "full",
    "null",
    "ptmx",
    "pts",
    "random",
    "shm",
    "stderr",
    "stdin",
    "stdout",
    "tty",
    "urandom",
    "zero",
}


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_the_gpu_jail_reaches_the_gpu_through_its_nodes_only(kind, tmp_path):
    """The variant that runs candidates on the H200: CUDA works in it (so every attack above hit the
    real thing), and /dev holds bwrap's standard nodes and the NVIDIA ones, no disk, no /dev/mem."""
    code = """
import os, torch
print('CUDA', torch.cuda.is_available() and torch.ones(1, device='cuda').add(1).item())
print('DEV', sorted(os.listdir('/dev')))
"""
    r = run_py(code, make_jail(kind, _folder(tmp_path)), timeout=180)
    assert r.returncode == 0, r.stderr
    assert "CUDA 2.0" in r.stdout, r.stdout
    dev = eval(r.stdout.split("DEV", 1)[1].strip())
    assert [d for d in dev if d not in _STANDARD_DEV and not d.startswith("nvidia")] == []
    assert any(d.startswith("nvidia") for d in dev)


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_the_gpu_jail_cannot_change_the_gpu_for_everyone(kind, tmp_path):
    """Its uid maps to root outside (when the agent runs as root) but it has no capability: the driver
    refuses what would change the GPU for every process (compute mode, locked clocks), and the GPU's
    PCI device and the driver's files are read-only (probed with access(), never written)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi is not on this GPU machine's PATH")
    query = [smi, "-i", "0", "--query-gpu=compute_mode", "--format=csv,noheader"]
    mode = subprocess.run(query, capture_output=True, text=True, timeout=60).stdout.strip()
    code = f"""
import glob, os, subprocess
for args in (['-c', 'EXCLUSIVE_PROCESS'], ['-lgc', '300,300']):
    try:
        r = subprocess.run([{smi!r}, '-i', '0', *args], capture_output=True, text=True, timeout=60)
        print('SMI', args[0], r.returncode, repr((r.stdout + r.stderr).strip()[-200:]))
    except OSError as e:
        print('NO SMI', e)
paths = glob.glob('/sys/bus/pci/devices/*/reset') + glob.glob('/sys/bus/pci/devices/*/remove')
paths += glob.glob('/sys/bus/pci/devices/*/power/control') + ['/sys/bus/pci/rescan']
paths += glob.glob('/proc/driver/nvidia/**', recursive=True)
print('WRITABLE', [p for p in paths if os.path.isfile(p) and os.access(p, os.W_OK)])
"""
    try:
        r = run_py(code, make_jail(kind, _folder(tmp_path)), timeout=180)
    finally:  # had either gone through, the GPU is put back as it was
        changed = subprocess.run(query, capture_output=True, text=True, timeout=60).stdout.strip() != mode
        if changed:
            subprocess.run([smi, "-i", "0", "-c", mode.replace(" ", "_").upper()], capture_output=True, timeout=60)
        subprocess.run([smi, "-i", "0", "-rgc"], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not changed, "the jailed process changed the GPU's compute mode"
    for line in (ln for ln in r.stdout.splitlines() if ln.startswith("SMI")):
        assert line.split()[2] != "0", f"nvidia-smi in the jail was allowed: {line}"
    assert "WRITABLE []" in r.stdout, r.stdout


def _folder(tmp_path: Path) -> Path:
    """The folder the jail may write (the judge's scratch, the shell's workspace)."""
    folder = tmp_path / "writable"
    folder.mkdir(exist_ok=True)
    return folder


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
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuda_agent.cli",
            "eval",
            str(task / "model.py"),
            "--candidate",
            str(task / "honest"),
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--json",
        ],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    verdict = json.loads(proc.stdout)["verdict"]
    assert verdict["status"] == "correct", verdict["error"]
