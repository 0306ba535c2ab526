"""The jail's limits (cuda_agent/jail_limits.py), attacked: a fork bomb and a thread bomb (as root
with the pids cgroup, as an ordinary user; a bounded fork tree as root without a cgroup), /tmp,
/dev/shm and /dev filled, the scratch folder filled with one file, many files, many folders; each
stopped at its limit with a one-line note, while the host goes on. Each runs also in the jails the
judge and the shell use on a GPU machine (GPU-marked). Timeouts: a limit that stops holding fails
the test instead of hanging it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from attack_requests import Bomb, FillScratch, FillTmp
from jails import KINDS, make_jail

from cuda_agent import jail_limits
from cuda_agent.eval.channel import ChildError, JailedChild
from cuda_agent.eval.scratch import remove_tree
from cuda_agent.jail import Jail, JailUnavailable, jail_problem, minimal_env, thread_count
from cuda_agent.tools.shell import run_command

pytestmark = [pytest.mark.skipif(jail_problem() is not None, reason=str(jail_problem())), pytest.mark.timeout(120)]

MiB = 1 << 20

# every process forks again for 3 s (children too), sleeping a little after a refusal; then all exit
FORK_BOMB = """
import os, sys, time
end = time.time() + 3
while time.time() < end:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
time.sleep(0.5)
"""
THREAD_BOMB = """
import threading, time
made = 0
try:
    while made < 5000:
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
        made += 1
except RuntimeError as e:
    print('REFUSED', made, e)
time.sleep(1)  # at the limit a while: RLIMIT_NPROC keeps no count, the watch sees it there
"""
# past the limit but bounded: 2**8 = 256 processes, then a wait the watch must cut short. Where nothing
# refuses a fork (root without a cgroup) an unbounded bomb starves the watch on a busy 2-core machine
# and takes the host's memory before it is killed (CI's runner was OOM-killed so); this one cannot.
TREE_OF_256 = """
import os, time
for _ in range(8):
    try:
        os.fork()
    except OSError:
        pass
time.sleep(30)
print('NOT STOPPED')
"""


def host_processes() -> int:
    return sum(name.isdigit() for name in os.listdir("/proc"))


def run_jailed(
    jail: Jail, code: str, timeout: float = 60, sample: bool = True
) -> tuple[subprocess.CompletedProcess, list[str], int]:
    """Run python `code` in `jail`: (its result, the limits it hit, the most tasks seen in its tree;
    not counted unless `sample`: the count holds the GIL, which the watch's thread needs too)."""
    proc = jail.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, deadline = 0, time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        peak = max(peak, thread_count(proc.pid)) if sample else 0
        time.sleep(0.05)
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
        pytest.fail(f"the jailed process still ran after {timeout} s")
    out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.limit_hits(), peak


def settled(before: int, slack: int = 20, wait_s: float = 15) -> int:
    """Host processes once the jail's are gone (the namespace takes them down after its init)."""
    deadline = time.monotonic() + wait_s
    while (now := host_processes()) > before + slack and time.monotonic() < deadline:
        time.sleep(0.2)
    return now


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "scratch"
    d.mkdir()
    return d


@pytest.fixture
def no_cgroup(monkeypatch):
    """The route of a root without a writable cgroup (a container): the watch counts and kills."""
    monkeypatch.setenv("CUDA_AGENT_JAIL_CGROUP", "0")
    jail_limits.pids_base.cache_clear()
    yield
    jail_limits.pids_base.cache_clear()


# -- processes and threads ----------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_fork_bomb_is_held_by_the_pids_cgroup_as_root(kind, folder):
    if os.getuid() != 0 or jail_limits.pids_base() is None:
        pytest.skip("needs root and a writable cgroup with the pids controller")
    before = host_processes()
    r, hits, peak = run_jailed(make_jail(kind, folder, pids=64), FORK_BOMB)
    assert peak <= 64 + 1, f"{peak} tasks in a jail of 64 (bwrap outside it is the one more)"
    assert "hit its limit of 64 processes and threads (fork or thread creation failed): start fewer" in hits
    assert settled(before) <= before + 20, "the bomb's processes outlived it"
    assert subprocess.run(["true"]).returncode == 0  # the host still forks
    deadline = time.monotonic() + 10  # the watch removes it once the namespace's last task is gone
    while list(jail_limits.pids_base().glob(f"jail-{os.getpid()}-*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(jail_limits.pids_base().glob(f"jail-{os.getpid()}-*")), "its cgroup was left behind"


@pytest.mark.parametrize("kind", KINDS)
def test_thread_bomb_is_held_too(kind, folder):
    if os.getuid() != 0 or jail_limits.pids_base() is None:
        pytest.skip("needs root and a writable cgroup with the pids controller")
    r, hits, peak = run_jailed(make_jail(kind, folder, pids=64), THREAD_BOMB)
    assert "REFUSED" in r.stdout and peak <= 64 + 1, r.stdout + r.stderr
    assert any(h.startswith("hit its limit of 64 processes and threads") for h in hits)


@pytest.mark.parametrize("kind", KINDS)
def test_fork_bomb_is_stopped_by_the_watch_as_root_without_a_cgroup(kind, folder, no_cgroup):
    if os.getuid() != 0:
        pytest.skip("the route of root without a cgroup")
    before = host_processes()
    r, hits, _ = run_jailed(make_jail(kind, folder, pids=64), TREE_OF_256, sample=False)
    # killed (left alone, the tree waits 30 s and ends with 0)
    assert r.returncode == -9 and "NOT STOPPED" not in r.stdout, f"nothing stopped it ({r.returncode})"
    assert hits == ["went over its limit of 64 processes and threads and was stopped: start fewer"]
    # no hard limit on this route: what matters is that it ends and takes every process with it
    assert settled(before) <= before + 20, "the bomb's processes outlived the jail"
    assert subprocess.run(["true"]).returncode == 0


NON_ROOT = """
import json, subprocess, sys, time
from cuda_agent.jail import Jail, jail_problem, thread_count
if jail_problem():
    print(json.dumps({"skip": jail_problem()})); sys.exit()
code = sys.argv[1]
proc = Jail(pids=64).popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
peak = 0
while proc.poll() is None:
    peak = max(peak, thread_count(proc.pid)); time.sleep(0.05)
print(json.dumps({"peak": peak, "hits": proc.limit_hits(), "rc": proc.returncode}))
"""


@pytest.mark.parametrize("bomb", [FORK_BOMB, THREAD_BOMB], ids=["fork", "threads"])
def test_bombs_are_held_by_rlimit_nproc_as_an_ordinary_user(bomb, tmp_path):
    """Not root: no cgroup is writable, and RLIMIT_NPROC, set inside the jail's user namespace, binds."""
    if os.getuid() != 0:
        pytest.skip("runs the harness as user 65534, which only root can start")
    python = shutil.which("python3", path="/usr/bin:/bin")
    package = Path(__file__).resolve().parents[2]
    probe = subprocess.run(
        [python or "python3", "-c", "import cuda_agent.jail"],
        user=65534,
        group=65534,
        extra_groups=[],
        env={"PYTHONPATH": str(package), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        cwd="/",
    )
    if python is None or probe.returncode != 0:
        pytest.skip(f"user 65534 cannot import the package with a system python3: {probe.stderr.strip()[-200:]}")
    tmp_path.chmod(0o777)
    r = subprocess.run(
        [python, "-c", NON_ROOT, bomb],
        user=65534,
        group=65534,
        extra_groups=[],
        cwd=tmp_path,
        env={"PYTHONPATH": str(package), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(f"no jail for an ordinary user here: {result['skip']}")
    assert result["peak"] <= 64 + 1, result
    assert any(h.startswith("hit its limit of 64 processes and threads") for h in result["hits"]), result


def test_a_bad_limit_setting_is_one_line_saying_what_to_do(monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_JAIL_PIDS", "lots")
    with pytest.raises(
        JailUnavailable,
        match=r"^CUDA_AGENT_JAIL_PIDS='lots' is not a whole number of processes "
        r"and threads above 0: unset it \(default 1024\) or give one$",
    ):
        Jail()
    monkeypatch.setenv("CUDA_AGENT_JAIL_PIDS", "")
    monkeypatch.setenv("CUDA_AGENT_JAIL_TMP_MIB", "0")
    with pytest.raises(JailUnavailable, match="CUDA_AGENT_JAIL_TMP_MIB='0' is not a whole number of MiB"):
        Jail()
    monkeypatch.setenv("CUDA_AGENT_JAIL_TMP_MIB", "512")
    assert Jail().tmp_bytes == 512 * MiB


def test_the_jail_cannot_leave_or_loosen_its_cgroup(folder):
    if os.getuid() != 0 or jail_limits.pids_base() is None:
        pytest.skip("needs root and a writable cgroup with the pids controller")
    code = """
import glob, os
for f in glob.glob('/sys/fs/cgroup/**/cgroup.procs', recursive=True) + glob.glob('/sys/fs/cgroup/**/tasks',
                                                                                 recursive=True):
    try:
        open(f, 'w').write(str(os.getpid())); print('MOVED', f)
    except OSError:
        pass
for f in glob.glob('/sys/fs/cgroup/**/pids.max', recursive=True):
    try:
        open(f, 'w').write('max'); print('RAISED', f)
    except OSError:
        pass
"""
    jail = make_jail("plain", folder, pids=64)
    proc = jail.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cgroups = list(jail_limits.pids_base().glob(f"jail-{os.getpid()}-*"))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "MOVED" not in out and "RAISED" not in out
    assert all((c / "pids.max").read_text().strip() == "64" for c in cgroups if c.exists())


# -- /tmp, /dev/shm, /dev ------------------------------------------------------------------
FILL = """
import mmap, os
path, how = {path!r}, {how!r}
written = 0
try:
    if how == 'one':  # one file, as large as it goes
        with open(path + '/big', 'wb') as f:
            while True:
                f.write(b'x' * (1 << 20)); written += 1 << 20
    elif how == 'many':  # many small files (128 MiB at most: past every limit here)
        for i in range(2000):
            with open(f'{{path}}/f{{i}}', 'wb') as f:
                f.write(b'x' * 65536); written += 65536
    elif how == 'mmap':  # a sparse file written through a mapping: SIGBUS where the page cannot be had
        fd = os.open(path + '/mapped', os.O_RDWR | os.O_CREAT)
        os.ftruncate(fd, 1 << 30)
        m = mmap.mmap(fd, 1 << 30)
        for off in range(0, 1 << 30, 4096):
            m[off] = 1
except OSError as e:
    print('REFUSED', written, e.errno)
"""


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mount", ["/tmp", "/dev/shm"])
@pytest.mark.parametrize("how", ["one", "many", "mmap"])
def test_filling_tmp_or_dev_shm_stops_at_its_limit(kind, mount, how, folder):
    jail = make_jail(kind, folder, tmp_bytes=64 * MiB, shm_bytes=64 * MiB)
    t = time.monotonic()
    r, hits, _ = run_jailed(jail, FILL.format(path=mount, how=how))
    assert time.monotonic() - t < 30
    if how == "mmap":
        assert r.returncode in (-7, 128 + 7), r.stderr  # SIGBUS: the page could not be had
    else:
        assert "REFUSED" in r.stdout and " 28" in r.stdout, r.stdout + r.stderr  # ENOSPC
        written = int(r.stdout.split("REFUSED")[1].split()[0])
        assert written <= 64 * MiB
    assert f"filled its {mount} (limit 64 MiB): write less there" in hits


def test_tmp_fill_is_noted_without_size_support_and_the_jail_stopped(folder, monkeypatch):
    """A bubblewrap without --size: the watch measures the tmpfs and stops the jail past its limit."""
    monkeypatch.setattr("cuda_agent.jail._sizes_tmpfs", lambda bwrap: False)
    # 512 MiB at most (the tmpfs is half the memory now), then a wait the watch must cut short
    code = (
        "import time\nwith open('/tmp/big', 'wb') as f:\n    for _ in range(512): f.write(b'x' * (1 << 20))\n"
        "time.sleep(20)\nprint('NOT STOPPED')"
    )
    r, hits, _ = run_jailed(make_jail("plain", folder, tmp_bytes=64 * MiB), code)
    assert r.returncode != 0 and "NOT STOPPED" not in r.stdout
    assert hits == ["filled its /tmp (limit 64 MiB) and was stopped: write less there"]


@pytest.mark.parametrize("kind", KINDS)
def test_dev_itself_takes_no_files(kind, folder):
    """bwrap's /dev is a tmpfs of its own: writable, it took half the memory unbounded."""
    code = """
import os
for make in (lambda: open('/dev/evil', 'wb').write(b'x'), lambda: os.mkdir('/dev/evil-dir'),
             lambda: os.symlink('/tmp', '/dev/evil-link')):
    try:
        make(); print('MADE')
    except OSError as e:
        print('REFUSED', e.errno)
open('/dev/null', 'wb').write(b'still usable')
"""
    r, _, _ = run_jailed(make_jail(kind, folder), code)
    assert r.returncode == 0, r.stderr
    assert "MADE" not in r.stdout and r.stdout.count("REFUSED") == 3


@pytest.mark.parametrize("kind", ["plain", pytest.param("judge", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("how", ["one", "many"])
def test_filling_the_scratch_folder_is_stopped(kind, how, folder):
    limit = 32 * MiB
    t = time.monotonic()
    code = FILL.format(path=str(folder), how=how)
    if how == "many":  # 128 MiB at most, then a wait the watch must cut short
        code += "\nimport time\ntime.sleep(20)\nprint('NOT STOPPED')"
    r, hits, _ = run_jailed(make_jail(kind, folder, quota={folder: limit}, file_size=limit), code)
    assert time.monotonic() - t < 30
    used, _, _ = jail_limits.folder_usage(folder, 10**6)
    if how == "one":  # RLIMIT_FSIZE: the one file stops at the quota (EFBIG), before the watch has to
        assert "REFUSED" in r.stdout and " 27" in r.stdout, r.stdout + r.stderr
        assert used <= limit + MiB
    else:
        assert r.returncode != 0 and "NOT STOPPED" not in r.stdout, "nothing stopped it"
        assert hits == [
            "filled its scratch folder (limit 32 MiB) and was stopped: write less there, or raise "
            "eval.scratch_gib if the task's outputs need more"
        ]
        assert used < limit + 512 * MiB  # a quarter second's writing past it at most, on any disk


def test_many_files_or_folders_in_the_scratch_folder_are_stopped(folder, monkeypatch):
    monkeypatch.setattr(jail_limits, "SCRATCH_ENTRIES", 300)
    wait = "\nimport time\ntime.sleep(20)\nprint('NOT STOPPED')"  # 5000 entries at most, then a wait cut short
    for code in (
        "import os\nfor i in range(5000): open(f'f{i}', 'w').close()",
        "import os\nfor i in range(5000): os.mkdir(f'd{i}')",
        "import os\nfor i in range(5000): os.mkdir('d'); os.chdir('d')",
    ):
        r, hits, _ = run_jailed(Jail(writable=[folder], cwd=folder, quota={folder: 1 << 30}), code + wait)
        assert r.returncode != 0 and "NOT STOPPED" not in r.stdout, "nothing stopped it"
        assert hits in (
            ["made over 300 files in its scratch folder and was stopped: write fewer"],
            [
                "was stopped: a folder in its scratch folder cannot be listed (nested deeper than a path "
                "can name), so its size is unknown: leave its folders readable and shallow"
            ],
        ), hits
        remove_tree(folder)  # thousands of folders deep: what the evaluator's kill() does with it
        assert not folder.exists()
        folder.mkdir()


# -- what the verdict and the tool say -----------------------------------------------------
CHILD = """
import os, sys, time
from cuda_agent.eval.channel import reply_fd_arg, serve
from attack_requests import Attack
FORK_BOMB = {bomb!r}

def fill_tmp(req):
    with open('/tmp/big', 'wb') as f:
        while True:
            f.write(b'x' * (1 << 20))

def fill_scratch(req):
    for i in range(200):  # 200 MiB at most, then a wait the watch must cut short
        with open(f'out{{i}}.bin', 'wb') as f:
            f.write(b'x' * (1 << 20))
    time.sleep(30)

def bomb(req):
    me = os.getpid()
    exec(FORK_BOMB)
    if os.getpid() != me:
        os._exit(0)  # a copy of the child: it must not answer too
    raise RuntimeError('forked as far as it could')

fd, _ = reply_fd_arg(sys.argv[1:])
serve(fd, lambda: {{'fill_tmp': fill_tmp, 'fill_scratch': fill_scratch, 'bomb': bomb}}, Attack)
"""


def _child(tmp_path, kind: str) -> JailedChild:
    """A jailed child of the evaluator's kind (cuda_agent/eval/channel.py) whose handlers attack."""
    mod = tmp_path / "mods"
    mod.mkdir()
    (mod / "attacker.py").write_text(CHILD.format(bomb=FORK_BOMB))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    jail = make_jail(kind, scratch, pids=64, tmp_bytes=64 * MiB, quota={scratch: 32 * MiB}, file_size=128 * MiB)
    jail.readable.append(mod)
    helpers = Path(__file__).resolve().parents[1] / "helpers"  # attack_requests.py
    jail.readable.append(helpers)
    # ahead of what the jail puts there itself (the project and its packages, e.g. wheels in /tmp/site):
    # jail.env replaces minimal_env's value, so that value is kept at the end
    jail.env["PYTHONPATH"] = ":".join(
        p for p in (str(mod), str(helpers), str(Path(__file__).resolve().parents[2]), minimal_env()["PYTHONPATH"]) if p
    )
    return JailedChild("attacker", [], jail, scratch)


@pytest.mark.parametrize("kind", ["plain", pytest.param("judge", marks=pytest.mark.gpu)])
def test_the_verdict_says_which_limit_the_candidate_reached(kind, tmp_path):
    child = _child(tmp_path, kind)
    try:
        resp = child.request(FillTmp(), 60)
        assert not resp.ok
        assert resp.error.startswith("the candidate filled its /tmp (limit 64 MiB): write less there; OSError")
        if os.getuid() == 0 and jail_limits.pids_base() is not None:
            resp = child.request(Bomb(), 60)
            assert resp.error.startswith(
                "the candidate filled its /tmp (limit 64 MiB): write less there; hit "
                "its limit of 64 processes and threads (fork or thread creation failed): "
                "start fewer; RuntimeError: forked as far as it could"
            ), resp
        with pytest.raises(ChildError) as e:
            child.request(FillScratch(), 60)
        assert e.value.kind == "crash"
        first = str(e.value).splitlines()[0]
        assert "filled its scratch folder (limit 32 MiB) and was stopped" in first
        assert first.startswith("the candidate ") and "the attacker died while fill_scratch" in first
    finally:
        child.kill()


def test_the_shell_says_which_limit_the_command_reached(tmp_path):
    """The shell's own jail (GPU nodes and all); its default limits, made small for the test."""
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {"CUDA_AGENT_JAIL_TMP_MIB": "64", "CUDA_AGENT_JAIL_PIDS": "64"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        rc, out, _ = run_command("head -c 100M /dev/zero > /tmp/big; echo rc=$?", ws, 60)
        assert out.splitlines()[0] == "the command filled its /tmp (limit 64 MiB): write less there"
        assert "rc=1" in out
        if os.getuid() == 0 and jail_limits.pids_base() is not None:
            rc, out, _ = run_command(f"{sys.executable} -c {shlex.quote(FORK_BOMB)}", ws, 60)
            assert out.splitlines()[0].startswith("the command hit its limit of 64 processes and threads")
        rc, out, _ = run_command("echo fine", ws, 60)
        assert out == "fine"  # the next command starts afresh: the run goes on
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
