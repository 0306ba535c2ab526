"""`cuda-agent eval` end to end on CPU: table, --json, exit codes, clear errors for bad input."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from readme_commands import ROOT, as_argv, readme_command
from typer.testing import CliRunner

from cuda_agent.cli import app
from cuda_agent.cli_settings import CPU_EXAMPLE

TASK = Path(__file__).parent / "harness" / "cpu_task"
ARGS = ["--device", "cpu", "--no-compile-baseline", "--sets", "2"]


def run(*args):
    return CliRunner().invoke(app, ["eval", *map(str, args)])


def test_json_verdict_and_exit_0_for_a_correct_candidate():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuda_agent.cli",
            "eval",
            str(TASK / "model.py"),
            "--candidate",
            str(TASK / "honest"),
            *ARGS,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["verdict"]["status"] == "correct" and out["verdict"]["reward"] >= 1
    assert out["task"]["inputs"] == [{"shape": [1 << 15], "dtype": "float32"}] * 2
    assert len(out["task"]["hash"]) == 16


def test_table_and_exit_1_for_a_wrong_candidate():
    r = run(TASK / "model.py", "--candidate", TASK / "wrong", *ARGS)
    assert r.exit_code == 1, r.output
    assert "incorrect" in r.output and "outside tolerance" in r.output


def test_exit_3_for_a_compile_error(tmp_path):
    cand = tmp_path / "c"
    (cand / "kernels").mkdir(parents=True)
    (cand / "model_new.py").write_text((TASK / "honest" / "model_new.py").read_text())
    (cand / "kernels" / "k.cu").write_text('extern "C" void scale_add(float* x, cudaStream_t s) { oops; }\n')
    r = run(TASK / "model.py", "--candidate", cand, *ARGS)
    assert r.exit_code == 3 and "compile_error" in r.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope.py", "--candidate", "."], "task file not found"),
        ([TASK / "model.py", "--candidate", "/no/such/dir"], "candidate folder not found"),
        ([TASK / "model.py", "--candidate", TASK / "honest", "--tolerance", "loose"], "unknown tolerance preset"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(args, message):
    for json_out in ([], ["--json"]):  # errors go to stderr, table mode too; stdout stays empty
        r = run(*args, "--device", "cpu", *json_out)
        assert r.exit_code == 2 and message in r.stderr and r.stdout == "", r.output
        assert r.stderr.count("\n") == 1, r.stderr


def no_gpu_env(**more):
    """This machine as one without a GPU (a GPU machine hides its GPUs) and no device set anywhere."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_AGENT_EVAL__DEVICE"}
    return {**env, "CUDA_VISIBLE_DEVICES": "", **more}


def test_without_a_gpu_eval_stops_at_once_unless_the_cpu_is_asked_for(tmp_path):
    """No silent CPU: without a GPU the command stops before building anything, with one line on
    stderr (what is missing, doctor, --device cpu) and exit code 2; a settings layer that says cpu
    (here the project file) runs host-only as --device cpu does."""
    base = [
        sys.executable,
        "-m",
        "cuda_agent.cli",
        "eval",
        str(TASK / "model.py"),
        "--candidate",
        str(TASK / "honest"),
        "--no-compile-baseline",
        "--sets",
        "2",
    ]
    for json_out in ([], ["--json"]):
        proc = subprocess.run(
            base + json_out, capture_output=True, text=True, timeout=300, env=no_gpu_env(), cwd=tmp_path
        )
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
        assert proc.stderr.count("\n") == 1 and "no CUDA GPU is visible to torch" in proc.stderr
        assert "cuda-agent doctor" in proc.stderr and "--device cpu" in proc.stderr
        assert f"`{readme_cpu_command()}`" in proc.stderr  # the README's route to a first verdict
    (tmp_path / "cuda-agent.toml").write_text('[eval]\ndevice = "cpu"\n')
    proc = subprocess.run(
        base + ["--json"], capture_output=True, text=True, timeout=300, env=no_gpu_env(), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["device"] == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU: the launch fails at once there")
def test_a_kernel_launch_in_host_only_mode_is_a_runtime_error_that_says_so(tmp_path):
    """--device cpu runs launchers on the host: one that launches a __global__ kernel did nothing;
    the verdict says the launch failed and why (not "incorrect" over an untouched output)."""
    cand = tmp_path / "c"
    (cand / "kernels").mkdir(parents=True)
    (cand / "model_new.py").write_text((TASK / "honest" / "model_new.py").read_text())
    (cand / "kernels" / "k.cu").write_text(LAUNCHING_KERNEL)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuda_agent.cli",
            "eval",
            str(TASK / "model.py"),
            "--candidate",
            str(cand),
            *ARGS,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    verdict = json.loads(proc.stdout)["verdict"]
    assert proc.returncode == 4 and verdict["status"] == "runtime_error", proc.stdout[-3000:]
    error = verdict["error"]
    assert error.startswith(
        "scale_add launched a CUDA kernel: this candidate needs a GPU (--device cpu runs launchers on the host"
    ), error
    assert "\n" not in error and "Traceback" not in error and "insufficient" not in error  # one line, no frames
    assert verdict["sets"][0]["error"] == error


def readme_cpu_command() -> str:
    """The README's no-GPU command (its set-up section), which the no-GPU line names too."""
    command = readme_command("cuda-agent eval", "--device cpu")
    assert command == CPU_EXAMPLE, "README.md and cli_settings.CPU_EXAMPLE name different commands"
    return command


def test_the_readmes_no_gpu_command_gives_a_correct_verdict_on_a_machine_without_one():
    """A new user without a GPU copies the README's command in a clone: the example's host-only
    candidate builds, passes every check and is timed, exit code 0, the verdict table on stdout."""
    proc = subprocess.run(
        as_argv(readme_cpu_command()),
        capture_output=True,
        text=True,
        timeout=600,
        env=no_gpu_env(COLUMNS="200"),
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"^status\s+correct\s*$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^input sets\s+5/5 correct\s*$", proc.stdout, re.M), proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU: the launch fails at once there")
def test_a_gpu_example_with_device_cpu_says_in_one_line_that_its_kernels_need_a_gpu():
    """The GPU candidate beside it, run as the no-GPU line suggests (--device cpu): a runtime_error
    (exit code 4) whose one error line says the kernels need a GPU and names the host-only twin; no
    traceback anywhere in the output."""
    command = readme_cpu_command().replace("/candidate_cpu", "/candidate")
    proc = subprocess.run(
        as_argv(command), capture_output=True, text=True, timeout=600, env=no_gpu_env(COLUMNS="400"), cwd=ROOT
    )
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"^status\s+runtime_error\s*$", proc.stdout, re.M), proc.stdout
    errors = [line for line in proc.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "scale_add launched a CUDA kernel: this candidate needs a GPU" in errors[0], proc.stdout
    assert errors[0].rstrip().endswith("as examples/scale_add_small/candidate_cpu does"), errors  # all on one line
    assert "Traceback" not in proc.stdout + proc.stderr


LAUNCHING_KERNEL = """#include <cuda_runtime.h>
#include <stdint.h>
__global__ void scale_add_kernel(const float* x, const float* y, float* out, float alpha, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = alpha * x[i] + y[i];
}
extern "C" void scale_add(const float* x, const float* y, float* out, float alpha, int64_t n,
                          cudaStream_t stream) {
    scale_add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, out, alpha, n);
}
"""


def test_without_the_jail_eval_refuses_then_no_sandbox_is_the_recorded_way_out(tmp_path):
    """bubblewrap missing: one line naming what is missing and the flag; with --no-sandbox the same
    evaluation runs and its verdict says it ran unjailed."""
    import os

    env = {**os.environ, "CUDA_AGENT_BWRAP": str(tmp_path / "no-bwrap-here"), "CUDA_AGENT_CACHE": str(tmp_path / "c")}
    base = [
        sys.executable,
        "-m",
        "cuda_agent.cli",
        "eval",
        str(TASK / "model.py"),
        "--candidate",
        str(TASK / "honest"),
        *ARGS,
        "--json",
    ]
    refused = subprocess.run(base, capture_output=True, text=True, timeout=300, env=env)
    assert refused.returncode == 5, refused.stderr[-2000:]
    error = json.loads(refused.stdout)["verdict"]["error"]
    assert "bubblewrap" in error and "--no-sandbox" in error and "\n" not in error
    unjailed = subprocess.run(base + ["--no-sandbox"], capture_output=True, text=True, timeout=300, env=env)
    assert unjailed.returncode == 0, unjailed.stderr[-2000:]
    verdict = json.loads(unjailed.stdout)["verdict"]
    assert verdict["status"] == "correct" and "evaluated without the jail (--no-sandbox)" in verdict["notes"]
