"""`cuda-agent doctor`: a plain report on CPU-only machines, no leaked keys, each check isolated."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cuda_agent import doctor, doctor_checks, doctor_facts
from cuda_agent.cli import app
from cuda_agent.doctor import Check
from cuda_agent.doctor_facts import Driver, Facts, Gpu


def _has_gpu() -> bool:
    d = Facts(None, None).driver
    return isinstance(d, Driver) and bool(d.gpus)


HAS_GPU = _has_gpu()
cpu_only = pytest.mark.skipif(HAS_GPU, reason="asserts what doctor says without a GPU")
# Wide enough that rich does not wrap the phrases the tests look for.
WIDE = {"COLUMNS": "250"}


def by_name(checks: list[Check], name: str) -> Check:
    return next(c for c in checks if c.name == name)


@pytest.fixture
def fake_cuda(tmp_path, monkeypatch):
    """A CUDA_HOME whose nvcc says 13.0 and knows three architectures."""
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(
        '#!/bin/sh\ncase "$1" in\n'
        "  --list-gpu-arch) echo compute_75; echo compute_80; echo compute_90;;\n"
        '  *) echo "Cuda compilation tools, release 13.0, V13.0.88";;\nesac\n'
    )
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    return nvcc


def facts_with(driver, **attrs) -> Facts:
    f = Facts(None, None)
    f.driver = driver  # cached_property: an instance attribute takes its place
    for k, v in attrs.items():
        setattr(f, k, v)
    return f


H200 = Gpu("NVIDIA H200", 140.0, (9, 0))


# --- on this CPU machine ---------------------------------------------------------------------


@cpu_only
def test_no_gpu_is_a_plain_required_failure():
    checks = doctor.run_checks()
    gpu = by_name(checks, "GPU / driver")
    assert not gpu.ok and gpu.status == "FAIL"
    assert gpu.detail.startswith("no NVIDIA GPU / driver found (NVML: ")
    assert gpu.fix == doctor_checks.NO_GPU_FIX
    assert doctor.exit_code(checks) == 1


@cpu_only
def test_cli_table_says_no_gpu_and_exits_1():
    result = CliRunner().invoke(app, ["doctor"], env=WIDE)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # typer.Exit(1), not a crash
    assert "no NVIDIA GPU / driver found" in result.output
    assert "cannot time kernels" in result.output
    assert "Not ready" in result.output and "GPU / driver" in result.output


@cpu_only
def test_module_entry_point_json_parses_and_exits_1():
    done = subprocess.run(
        [sys.executable, "-m", "cuda_agent.cli", "doctor", "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False
    gpu = next(c for c in report["checks"] if c["name"] == "GPU / driver")
    assert gpu["status"] == "FAIL" and "no NVIDIA GPU / driver found" in gpu["detail"]
    assert {c["name"] for c in report["checks"]} == {name for name, _, _ in doctor.CHECKS}


def test_real_nvcc_is_found_with_its_version():
    if doctor_facts.find_tool("nvcc") is None:
        pytest.skip("no CUDA toolkit here")
    nvcc = by_name(doctor.run_checks(), "nvcc")
    assert re.match(r"nvcc \d+\.\d+ at /\S+ \(from ", nvcc.detail), nvcc.detail
    if not HAS_GPU:
        assert nvcc.ok


def test_importing_the_cli_imports_neither_torch_nor_pynvml():
    code = "import sys, cuda_agent.cli; print(sorted({'torch', 'pynvml'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --- nvcc --------------------------------------------------------------------------------------


def test_cuda_home_comes_first_and_release_is_parsed(fake_cuda):
    found = doctor_checks.check_nvcc(facts_with("no driver"))
    assert found.ok
    assert found.detail == f"nvcc 13.0 at {fake_cuda} (from CUDA_HOME/bin)"


def test_missing_nvcc_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(doctor_facts, "DEFAULT_CUDA_BIN", tmp_path / "none")
    nvcc = by_name(doctor.run_checks(), "nvcc")
    assert not nvcc.ok and nvcc.status == "FAIL"
    assert nvcc.detail.startswith("nvcc not found")
    assert "install the CUDA toolkit" in nvcc.fix and "CUDA_HOME" in nvcc.fix


def test_nvcc_that_cannot_serve_the_gpu_fails(fake_cuda):
    v100_old_driver = Driver("535.1", (12, 2), [Gpu("Tesla V100", 32.0, (7, 0))])
    found = doctor_checks.check_nvcc(facts_with(v100_old_driver))
    assert not found.ok
    assert "cannot build for sm_70" in found.fix
    assert "the driver supports CUDA 12.2 only" in found.fix


def test_nvcc_that_serves_the_gpu_names_its_arch(fake_cuda):
    found = doctor_checks.check_nvcc(facts_with(Driver("580.1", (13, 0), [H200])))
    assert found.ok and found.detail.endswith("builds for sm_90")


# --- GPU and CUDA versions, from a given driver --------------------------------------------------


def test_gpu_detail_lists_driver_and_each_gpu():
    found = doctor_checks.check_gpu(facts_with(Driver("580.159.03", (13, 0), [H200, H200])))
    assert found.ok
    assert found.detail == (
        "driver 580.159.03 (supports CUDA 13.0); GPU 0: NVIDIA H200, 140 GiB, sm_90; GPU 1: NVIDIA H200, 140 GiB, sm_90"
    )


def test_torch_cuda_major_unlike_nvcc_warns():
    f = facts_with(Driver("580.1", (13, 0), [H200]), torch_cuda=(12, 8), nvcc_version=(13, 0))
    found = doctor_checks.check_cuda_versions(f)
    assert not found.ok and "differ" in found.fix


def test_driver_older_than_torch_warns_but_newer_does_not():
    old = facts_with(Driver("550.1", (12, 4), [H200]), torch_cuda=(13, 0), nvcc_version=(13, 0))
    assert "update the driver" in doctor_checks.check_cuda_versions(old).fix
    newer = facts_with(Driver("580.1", (13, 0), [H200]), torch_cuda=(12, 8), nvcc_version=(12, 8))
    assert doctor_checks.check_cuda_versions(newer).ok


# --- the model key ---------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["doctor", "--model", "openai/gpt-4o"], ["doctor", "--model", "gpt-4o", "--json"]])
def test_a_set_key_shows_set_never_its_value(args, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET")
    result = CliRunner().invoke(app, args, env=WIDE)
    assert "OPENAI_API_KEY set" in result.output
    assert "SECRET" not in result.output


def test_an_unset_key_warns(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    found = doctor_checks.check_model(Facts("claude-sonnet-4-5", None))
    assert not found.ok and found.detail.endswith("ANTHROPIC_API_KEY not set")
    assert found.fix == "export ANTHROPIC_API_KEY=<your key>"


@pytest.mark.parametrize(
    "model, env",
    [
        ("openai/gpt-4o", "OPENAI_API_KEY"),
        ("gpt-5", "OPENAI_API_KEY"),
        ("o3-mini", "OPENAI_API_KEY"),
        ("o4-mini", "OPENAI_API_KEY"),
        ("anthropic/claude-opus-4", "ANTHROPIC_API_KEY"),
        ("claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("gemini/gemini-2.5-pro", "GEMINI_API_KEY"),
        ("openrouter/qwen/qwen3-coder", "OPENROUTER_API_KEY"),
        ("deepseek/deepseek-chat", "DEEPSEEK_API_KEY"),
        ("mistral/codestral", None),
    ],
)
def test_key_env_by_provider(model, env):
    assert doctor_checks.key_env(model) == env


def test_local_servers_and_api_base_need_no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert doctor_checks.check_model(Facts("hosted_vllm/Qwen3-8B", None)).ok
    assert doctor_checks.check_model(Facts("ollama/llama3", None)).ok
    monkeypatch.setenv("CUDA_AGENT_API_BASE", "http://127.0.0.1:8000/v1")
    found = doctor_checks.check_model(Facts("openai/my-model", None))
    assert found.ok and "no API key needed" in found.detail


def test_model_comes_from_env_when_not_given(monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_MODEL", "deepseek/deepseek-chat")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "x")
    assert doctor_checks.check_model(Facts(None, None)).detail == "deepseek/deepseek-chat: DEEPSEEK_API_KEY set"
    monkeypatch.delenv("CUDA_AGENT_MODEL")
    none = doctor_checks.check_model(Facts(None, None))
    assert not none.ok and none.detail.startswith("no model configured")


# --- the report as a whole -----------------------------------------------------------------------


def test_a_check_that_raises_becomes_a_failed_check(monkeypatch):
    def boom(_facts):
        raise OSError("nvidia-smi exploded")

    monkeypatch.setattr(doctor, "CHECKS", [("GPU / driver", "required", boom), *doctor.CHECKS[1:]])
    checks = doctor.run_checks()
    gpu = by_name(checks, "GPU / driver")
    assert not gpu.ok and "OSError: nvidia-smi exploded" in gpu.detail
    assert len(checks) == len(doctor.CHECKS)


def test_only_required_failures_set_the_exit_code():
    ok = Check(name="a", ok=True, detail="")
    warn = Check(name="b", ok=False, detail="", severity="optional")
    fail = Check(name="c", ok=False, detail="")
    assert warn.status == "WARN" and fail.status == "FAIL"
    assert doctor.exit_code([ok, warn]) == 0
    assert doctor.exit_code([ok, warn, fail]) == 1


def test_jail_check_says_whether_the_jail_starts(monkeypatch):
    from cuda_agent import jail

    found = doctor_checks.check_jail(Facts(None, None))
    assert found.ok == (jail.jail_problem() is None)
    jail.jail_problem.cache_clear()
    monkeypatch.setenv("CUDA_AGENT_BWRAP", "/nonexistent/bwrap")
    try:
        found = doctor_checks.check_jail(Facts(None, None))
        assert not found.ok and "--no-sandbox" in found.detail
    finally:
        jail.jail_problem.cache_clear()


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU")
def test_on_a_gpu_machine_the_required_checks_pass():
    checks = doctor.run_checks()
    assert by_name(checks, "GPU / driver").ok
    assert "builds for sm_" in by_name(checks, "nvcc").detail
    assert by_name(checks, "torch").ok, by_name(checks, "torch").fix
    assert doctor.exit_code(checks) == 0, [c for c in checks if c.status == "FAIL"]


@pytest.mark.parametrize(
    "params, refused", [("RmProfilingAdminOnly: 1\n", True), ("RmProfilingAdminOnly: 0\n", False), (None, False)]
)
def test_ncu_check_warns_when_the_driver_keeps_counters_for_admins(tmp_path, monkeypatch, params, refused):
    """profile runs ncu in the jail, without admin rights even as root: a driver that restricts the
    counters to admins would refuse it, and doctor says so with the driver option to change."""
    ncu = tmp_path / "bin" / "ncu"
    ncu.parent.mkdir()
    ncu.write_text("#!/bin/sh\necho 'NVIDIA (R) Nsight Compute Command Line Profiler Version 2099.1.0'\n")
    ncu.chmod(0o755)
    monkeypatch.setattr(
        doctor_facts, "find_tool", lambda name: doctor_facts.Tool(ncu, "test") if name == "ncu" else None
    )
    p = tmp_path / "params"
    if params is not None:
        p.write_text("ResmanDebugLevel: 4294967295\n" + params)
    monkeypatch.setattr(doctor_checks, "NVIDIA_PARAMS", p)
    found = doctor_checks.check_ncu(Facts(None, None))
    assert "2099.1.0" in found.detail
    assert found.ok is not refused
    if refused:
        assert "NVreg_RestrictProfilingToAdminUsers=0" in found.fix and "admin" in found.detail
