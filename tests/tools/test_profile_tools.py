"""profile and sanitize: their command lines, and the tools end to end on a real candidate (built
by nvcc) with stand-in ncu / compute-sanitizer executables that print captured output and record
how they were called. GPU tests (marked) run the real tools on the examples and the fault kernels."""

import json
import re
import shutil
import stat
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from procs import running  # tests/helpers

from cuda_agent.profiling import runner
from cuda_agent.profiling.ncu import SECTIONS, find_ncu, ncu_command
from cuda_agent.profiling.sanitizer import ENV, find_sanitizer, sanitizer_command
from cuda_agent.settings import ToolSettings  # noqa: E402
from cuda_agent.tools import profile_tool, sanitize_tool
from cuda_agent.tools.base import TaskCopy, ToolContext
from cuda_agent.tools.registry import default_tools

ROOT = Path(__file__).resolve().parents[2]
LAYERNORM = ROOT / "examples" / "layernorm"
FIXTURES = ROOT / "tests" / "profiling" / "fixtures"
FAULT_TASK = ROOT / "tests" / "adversarial" / "task.py"
needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
    reason="needs nvcc (the tools build the kernels first)",
)

# A stand-in for ncu / compute-sanitizer. It runs in the jail like the real tools, so it takes its
# orders from stub.json beside it (the jail gives it no test variables) and leaves its record in its
# working folder (the workspace, the one folder the jail lets it write).
STUB = """#!{python}
import json, os, subprocess, sys, time
cfg = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "stub.json")))
env = {{k: os.environ.get(k) for k in ("CUDA_AGENT_KERNELS", "PYTORCH_NO_CUDA_MEMORY_CACHING", "OPENAI_API_KEY")}}
json.dump({{"argv": sys.argv[1:], "env": env}}, open("stub-record.json", "w"))
if cfg.get("grandchild"):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60.424)"])
time.sleep(float(cfg.get("sleep", 0)))
sys.stdout.write(cfg.get("stdout", ""))
sys.stderr.write(cfg.get("stderr", ""))
sys.exit(int(cfg.get("exit", 0)))
"""


@pytest.fixture
def stub(tmp_path, monkeypatch):
    path = tmp_path / "bin" / "stub-tool"
    path.parent.mkdir()
    path.write_text(STUB.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    orders: dict = {}

    def order(**kw) -> None:
        orders.update(kw)
        (path.parent / "stub.json").write_text(json.dumps(orders))

    order()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    return SimpleNamespace(
        path=path, order=order, record=lambda: json.loads((tmp_path / "ws" / "stub-record.json").read_text())
    )


def workspace(tmp_path, candidate: Path, task: Path, **settings) -> ToolContext:
    root = tmp_path / "ws"
    shutil.copytree(candidate, root)
    return ToolContext(
        workspace=SimpleNamespace(root=root),
        tools=ToolSettings(gpu_name="NVIDIA H200", **settings),
        task_copy=TaskCopy(ref=str(task), hash="unchecked"),
    )


def layernorm(tmp_path, stub, **settings):
    return workspace(tmp_path, LAYERNORM / "candidate", LAYERNORM / "model.py", ncu_path=str(stub.path), **settings)


def fault(tmp_path, stub, name, **settings):
    return workspace(
        tmp_path, ROOT / "tests" / "gpu_faults" / name, FAULT_TASK, sanitizer_path=str(stub.path), **settings
    )


# -- command lines


def test_ncu_command_profiles_only_the_candidates_forward():
    argv = ncu_command("/x/ncu", "t.py::Model", Path("/ws"))
    line = " ".join(argv)
    assert argv[0] == "/x/ncu" and "--clock-control none" in line and "--csv --page details" in line
    assert argv[argv.index("--nvtx-include") + 1] == "candidate_forward/" and "--nvtx" in argv
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--section"] == list(SECTIONS)
    assert "--print-details all" in line and "--print-rule-details" in argv
    assert argv[-7:] == [sys.executable, "-m", "cuda_agent.eval.single_run", "t.py::Model", "/ws", "--warmup", "1"]


def test_ncu_command_is_the_capture_command_so_captures_are_fixtures():
    script = (ROOT / "benchmarks" / "gpu_suite.sh").read_text()
    capture = re.search(r"^\s*ncu (--.*?)python3 -m cuda_agent", script, re.S | re.M).group(1)
    capture = " ".join(capture.replace("\\\n", " ").replace('"', "").split())
    ours = " ".join(ncu_command("ncu", "t", Path("c"))[1:-7])
    assert ours == capture


@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "initcheck"])
def test_sanitizer_command(tool):
    argv = sanitizer_command("/x/compute-sanitizer", tool, "t.py", Path("/ws"))
    assert argv[:5] == ["/x/compute-sanitizer", "--tool", tool, "--print-limit", "20"]
    assert argv[5:8] == [sys.executable, "-m", "cuda_agent.eval.single_run"]  # sanitizer options end at 5
    assert argv[-3:] == ["/ws", "--warmup", "0"]  # one forward, nothing before it
    assert ENV == {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}  # the caching allocator hides overruns
    with pytest.raises(ValueError, match="memcheck, racecheck, initcheck"):
        sanitizer_command("cs", "synccheck", "t.py", Path("/ws"))


def test_tools_are_found_or_reported_missing(tmp_path, monkeypatch, stub):
    assert find_ncu(str(stub.path)) == stub.path and find_sanitizer(str(tmp_path / "nope")) is None
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("cuda_agent.kernels.toolkit.DEFAULT_CUDA_BIN", tmp_path / "empty")
    monkeypatch.setattr(runner, "EXTRA_PLACES", {"ncu": [str(tmp_path / "opt" / "*" / "ncu")]})
    assert find_ncu() is None
    (tmp_path / "opt" / "2025.3.0").mkdir(parents=True)
    shutil.copy(stub.path, tmp_path / "opt" / "2025.3.0" / "ncu")
    assert find_ncu() == tmp_path / "opt" / "2025.3.0" / "ncu"


def test_both_tools_are_offered():
    names = [t.name for t in default_tools(ToolSettings())]
    assert names.index("benchmark") < names.index("profile") < names.index("sanitize") < names.index("finish")


# -- profile, end to end with a stand-in ncu


@needs_nvcc
def test_profile_summarises_the_capture(tmp_path, stub, monkeypatch):
    stub.order(stdout=(FIXTURES / "ncu-layernorm.csv").read_text())
    ctx = layernorm(tmp_path, stub)
    r = default_by_name("profile").run({}, ctx)
    assert r.status == "ok", r.observation
    text = r.observation
    assert text.startswith("ncu: 1 kernel launch (1 kernel) in one forward") and "[0] ln_rows_reg<2> (yours)" in text
    # the build's own kernels (launchers.json): the one this forward did not launch is named
    assert "defined in kernels/ but not launched in this forward: ln_rows_generic" in text
    assert r.data["own_kernels"] == ["ln_rows_reg", "ln_rows_generic"]
    assert r.data["groups"] == [
        {"name": "ln_rows_reg<2>", "origin": "yours", "launches": 1, "total_us": 64.512, "ids": [0]}
    ]
    assert re.search(r"occupancy [\d.]+% of [\d.]+% theoretical", text) and "registers/thread" in text
    assert "advice: [OPT" in text and "roofline on H200 SXM" in text and "time floors:" in text
    last = text.splitlines()[-1]
    assert last.startswith("next: ") and last.endswith(("then compile, verify and benchmark", "consider finishing"))
    rec = stub.record()
    assert rec["argv"][-5:-2] == ["cuda_agent.eval.single_run", str(LAYERNORM / "model.py"), str(ctx.workspace.root)]
    assert list(Path(rec["env"]["CUDA_AGENT_KERNELS"]).glob("libkernels-*.so"))  # built before ncu ran
    assert rec["env"]["OPENAI_API_KEY"] is None  # no credentials in the profiled process
    assert r.data["kernels"][0]["registers"] and r.data["roofline"]["memory_floor_us"] > 0


def test_profile_without_ncu_is_one_line(tmp_path, stub, monkeypatch):
    monkeypatch.setattr(profile_tool, "find_ncu", lambda override=None: None)
    r = default_by_name("profile").run({}, layernorm(tmp_path, stub))
    assert r.status == "error" and "\n" not in r.observation and "ncu (Nsight Compute) not found" in r.observation


@needs_nvcc
@pytest.mark.parametrize(
    "stdout,stderr,says",
    [
        (
            "",
            "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters "
            "on the target device 0. For instructions on enabling permissions and to get more information see "
            "https://developer.nvidia.com/ERR_NVGPUCTRPERM\n",
            "not permitted",
        ),
        (
            "==PROF== Connected to process 1 (/usr/bin/python3)\n==PROF== Disconnected from process 1\n",
            "==WARNING== No kernels were profiled.\n",
            "saw no kernel inside the candidate_forward range",
        ),
    ],
)
def test_profile_failures_are_one_line(tmp_path, stub, monkeypatch, stdout, stderr, says):
    stub.order(stdout=stdout, stderr=stderr)
    r = default_by_name("profile").run({}, layernorm(tmp_path, stub))
    assert r.status == "error" and says in r.observation and "\n" not in r.observation


@needs_nvcc
def test_a_hanging_profile_is_killed_with_its_children(tmp_path, stub, monkeypatch):
    stub.order(sleep=30, grandchild=True)
    t0 = time.monotonic()
    r = default_by_name("profile").run({}, layernorm(tmp_path, stub, profile_timeout_s=2))
    assert r.status == "error" and "timed out after 2 s" in r.observation and time.monotonic() - t0 < 20
    time.sleep(0.5)
    assert not running("60.424"), "the profiled program's child outlived the timeout"


@needs_nvcc
def test_profile_of_kernels_that_do_not_build(tmp_path, stub):
    ctx = layernorm(tmp_path, stub)
    (ctx.workspace.root / "kernels" / "layernorm.cu").write_text('extern "C" void f(float* x) { nope; }\n')
    r = default_by_name("profile").run({}, ctx)
    assert r.status == "error" and "run compile and fix the first error" in r.observation and "nope" in r.observation


# -- sanitize, end to end with a stand-in compute-sanitizer


@needs_nvcc
@pytest.mark.parametrize(
    "tool,candidate,says",
    [
        ("memcheck", "oob_write", "invalid __global__ write of 4 bytes in relu_affine_kernel at relu_affine.cu:8"),
        ("racecheck", "shared_race", "shared-memory race: Write at relu_affine.cu:9 vs Read at relu_affine.cu:11"),
        (
            "initcheck",
            "uninit_global",
            "uninitialized __global__ read of 4 bytes in relu_affine_kernel at relu_affine.cu:12",
        ),
        ("memcheck", "illegal_address", "x20 reports"),
    ],
)
def test_sanitize_reports_the_finding_and_what_to_do(tmp_path, stub, monkeypatch, tool, candidate, says):
    stub.order(stdout=(FIXTURES / f"sanitizer-{tool}-{candidate}.txt").read_text())
    r = default_by_name("sanitize").run({"tool": tool}, fault(tmp_path, stub, candidate))
    assert r.status == "error" and says in r.observation, r.observation
    last = r.observation.splitlines()[-1]
    assert last.startswith("next: relu_affine.cu:") and last.endswith(f"run sanitize ({tool}) again and verify")
    rec = stub.record()
    assert rec["argv"][:2] == ["--tool", tool] and rec["argv"][-2:] == ["--warmup", "0"]
    assert rec["env"]["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1" and rec["env"]["OPENAI_API_KEY"] is None
    assert r.data["report"]["findings"]


@needs_nvcc
def test_sanitize_clean_run(tmp_path, stub, monkeypatch):
    stub.order(
        stdout="========= COMPUTE-SANITIZER\nsingle_run: done\n"
        "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    )
    r = default_by_name("sanitize").run({"tool": "racecheck"}, fault(tmp_path, stub, "oob_write"))
    assert r.status == "ok" and r.observation.startswith("sanitize: no errors found by racecheck")
    assert "memcheck and initcheck" in r.observation


@needs_nvcc
def test_sanitize_that_never_reaches_its_summary(tmp_path, stub, monkeypatch):
    stub.order(stderr="========= Error: Target application terminated before first instrumented API call\n", exit=1)
    r = default_by_name("sanitize").run({}, fault(tmp_path, stub, "oob_write"))
    assert r.status == "error" and "memcheck did not reach its summary: Error: Target application" in r.observation


def test_sanitize_without_the_tool_is_one_line(tmp_path, stub, monkeypatch):
    monkeypatch.setattr(sanitize_tool, "find_sanitizer", lambda override=None: None)
    r = default_by_name("sanitize").run({"tool": "initcheck"}, fault(tmp_path, stub, "uninit_global"))
    assert r.status == "error" and "\n" not in r.observation and "compute-sanitizer not found" in r.observation
    bad = default_by_name("sanitize").run({"tool": "synccheck"}, fault(tmp_path / "b", stub, "uninit_global"))
    assert bad.status == "error" and "tool" in bad.observation


def default_by_name(name):
    return next(t for t in default_tools(ToolSettings()) if t.name == name)


# -- on the GPU machine: the real tools


def real_ctx(tmp_path, candidate, task):
    root = tmp_path / "ws"
    shutil.copytree(candidate, root)
    return ToolContext(workspace=SimpleNamespace(root=root), task_copy=TaskCopy(ref=str(task), hash="unchecked"))


@pytest.mark.gpu
def test_profile_an_example_for_real(tmp_path):
    if find_ncu() is None:
        pytest.skip("ncu is not installed on this GPU machine")
    ctx = real_ctx(tmp_path, LAYERNORM / "candidate", LAYERNORM / "model.py")
    r = default_by_name("profile").run({}, ctx)
    if "not permitted" in r.observation:
        pytest.skip(r.observation)
    assert r.status == "ok", r.observation
    (k,) = [k for k in r.data["kernels"] if "ln_rows" in k["name"]]
    assert k["duration_us"] > 0 and k["registers"] and k["achieved_occupancy"] and r.data["roofline"]
    print(r.observation)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "tool,candidate,kind",
    [
        ("memcheck", "oob_write", "invalid __global__ write"),
        ("memcheck", "illegal_address", "invalid __global__ write|Illegal Address"),
        ("racecheck", "shared_race", "shared-memory race"),
        ("initcheck", "uninit_global", "uninitialized __global__"),
    ],
)
def test_sanitize_each_fault_for_real(tmp_path, tool, candidate, kind):
    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed on this GPU machine")
    ctx = real_ctx(tmp_path, ROOT / "tests" / "gpu_faults" / candidate, FAULT_TASK)
    r = default_by_name("sanitize").run({"tool": tool}, ctx)
    assert r.status == "error" and re.search(kind, r.observation) and "relu_affine.cu:" in r.observation, r.observation
    print(r.observation)


@pytest.mark.gpu
def test_sanitize_an_honest_kernel_for_real(tmp_path):
    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed on this GPU machine")
    ctx = real_ctx(tmp_path, ROOT / "tests" / "adversarial" / "honest" / "reordered", FAULT_TASK)
    r = default_by_name("sanitize").run({"tool": "memcheck"}, ctx)
    assert r.status == "ok" and "no errors found by memcheck" in r.observation, r.observation
