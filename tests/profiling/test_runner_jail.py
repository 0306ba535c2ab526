"""The profilers' runner starts its command in the jail: a hostile "profiler" (any program the
runner wraps runs the candidate's code) can read what it was given and nothing it was not."""

from __future__ import annotations

import sys

import pytest

from cuda_agent.jail import jail_problem
from cuda_agent.profiling.runner import run_wrapped

pytestmark = pytest.mark.skipif(jail_problem() is not None, reason=str(jail_problem()))


def test_wrapped_command_is_jailed(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-for-the-runner")
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "model_new.py").write_text("x = 1\n")
    secret = tmp_path / "elsewhere" / "judge-copy.py"
    secret.parent.mkdir()
    secret.write_text("the judge's task copy")
    code = f"""
import os, socket
print('ENV', 'sk-test-for-the-runner' in repr(dict(os.environ)))
print('CAND', open({str(cand / "model_new.py")!r}).read().strip())
for target in [{str(secret)!r}]:
    try:
        open(target, 'a').write('x')
        print('WROTE', target)
    except OSError:
        pass
try:
    open({str(secret)!r}).read()
    print('READ SECRET')
except OSError:
    pass
try:
    socket.create_connection(('1.1.1.1', 53), timeout=1)
    print('NETWORK')
except OSError:
    pass
"""
    run = run_wrapped([sys.executable, "-c", code], cwd=cand, timeout=60)
    assert run.returncode == 0, run.text
    assert "ENV False" in run.stdout and "CAND x = 1" in run.stdout
    assert "WROTE" not in run.stdout and "READ SECRET" not in run.stdout and "NETWORK" not in run.stdout
    assert secret.read_text() == "the judge's task copy"


def test_a_wrapper_tool_sees_its_install_folder(tmp_path, monkeypatch):
    """CUDA's `bin/ncu` is a script that runs the real ncu from /opt/nvidia/nsight-compute/<version>
    (on the H200, ncu in the jail said "Nsight Compute is not installed" until the runner showed
    that folder): the tool's install folders are readable inside, and not writable."""
    from cuda_agent.profiling import runner

    install = tmp_path / "opt" / "nsight-compute" / "2099.1"
    install.mkdir(parents=True)
    (install / "ncu").write_text('#!/bin/sh\necho real ncu ran\ntouch "$(dirname "$0")/wrote" 2>/dev/null || true\n')
    (install / "ncu").chmod(0o755)
    wrapper = tmp_path / "cuda" / "bin" / "ncu"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(f'#!/bin/sh\nexec {install / "ncu"} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setitem(runner.EXTRA_PLACES, "ncu", [str(tmp_path / "opt" / "nsight-compute" / "*" / "ncu")])
    cand = tmp_path / "cand"
    cand.mkdir()
    run = run_wrapped([str(wrapper), "--version"], cwd=cand, timeout=60)
    assert run.returncode == 0 and "real ncu ran" in run.stdout, run.text
    assert not (install / "wrote").exists()
