"""Shared test set-up: GPU tests are marked `gpu` and skipped where no CUDA device is visible, where
the commands are told to run on the CPU (CUDA_AGENT_EVAL__DEVICE=cpu)."""

import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest

# builders shared by several test folders (e.g. fake_run: a run folder with fixed content)
sys.path.insert(0, str(Path(__file__).parent / "helpers"))

# pytest started with SIGINT ignored (`nohup`, `cmd &` in a script) passes that on to every process the
# Ctrl-C tests start, and Python then never raises KeyboardInterrupt: those tests test Ctrl-C, so the
# suite restores it rather than depend on how it was started
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_HAS_GPU = None


def has_gpu() -> bool:
    global _HAS_GPU
    if _HAS_GPU is None:
        import torch

        _HAS_GPU = torch.cuda.is_available()
    return _HAS_GPU


# Without a GPU, eval, optimize and batch stop unless the CPU is asked for (host-only test kernels):
# the tests ask for it explicitly, for the whole session, on the setting's environment layer (what a
# user would set); subprocesses inherit it. A test of the no-GPU refusal removes it.
if not has_gpu():
    os.environ.setdefault("CUDA_AGENT_EVAL__DEVICE", "cpu")
# `cuda-agent eval` in-process unless a test asks for its warm server (tests/eval/test_eval_server.py):
# a server per test environment would outlive the test by its idle time
os.environ.setdefault("CUDA_AGENT_EVAL__SERVER_IDLE_S", "0")


# pytest-textual-snapshot writes its failure report to ./snapshot_report.html, into the checkout: put it
# in the temporary folder instead (the terminal summary names it), unless a run asks for a place
SNAPSHOT_REPORT = Path(tempfile.gettempdir()) / "cuda-agent-snapshot-report.html"


def pytest_configure(config):
    if getattr(config.option, "snapshot_report", None) == "snapshot_report.html":  # the plugin's default
        config.option.snapshot_report = str(SNAPSHOT_REPORT)


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    # builds and baselines go to a per-session cache, never the user's ~/.cache
    cache = tmp_path_factory.getbasetemp() / "cuda-agent-cache"
    monkeypatch.setenv("CUDA_AGENT_CACHE", os.environ.get("CUDA_AGENT_TEST_CACHE", str(cache)))
