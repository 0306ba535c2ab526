"""A run folder with fixed content (trajectory records with fixed times, a workspace repository
with fixed commit dates), so the app renders it the same way every time: the snapshot tests'
subject. Built with the project's own record types and git history code, not hand-written JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cuda_agent.eval.verdict import Finding, Timing, Verdict
from cuda_agent.records import (
    CallRecord,
    Closing,
    Evaluation,
    Header,
    ModelTurn,
    TaskInfo,
    ToolResultRecord,
    UserMessage,
)
from cuda_agent.trajectory import TrajectoryWriter
from cuda_agent.workspace.history import History, init_repo

T0 = 1796000000.0  # 2026-11-29, a fixed clock for every record
MODEL = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return x * 2 + y
"""
KERNEL_V1 = """#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_add_kernel(const float* x, const float* y, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * 2.0f + y[i];
}

extern "C" void scale_add(const float* x, const float* y, float* out, int64_t n, cudaStream_t s) {
    scale_add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, y, out, n);
}
"""
KERNEL_V2 = KERNEL_V1.replace("256, 0, s", "512, 0, s").replace("+ 255) / 256)", "+ 511) / 512)")
MODEL_NEW = """import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        kernels.scale_add(x, y, out, x.numel())
        return out
"""


def _timing(ms: float) -> Timing:
    return Timing(
        median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, p20_ms=ms, p80_ms=ms, reps=300, warmup=20, input_sets=3
    )


def build(root: Path, monkeypatch, best_reward: int = 2) -> Path:
    """Write the run folder `root/scale_add-demo` and return it; `best_reward`: what version 2 scored."""
    run = root / "scale_add-demo"
    ws = run / "workspace"
    (ws / "kernels").mkdir(parents=True)
    for k, v in {
        "GIT_AUTHOR_DATE": "2026-11-29T12:00:00+0000",
        "GIT_COMMITTER_DATE": "2026-11-29T12:00:00+0000",
    }.items():
        monkeypatch.setenv(k, v)
    history = History(init_repo(ws))
    (ws / "model.py").write_text(MODEL)
    history.commit("task: scale_add")
    (ws / "model_new.py").write_text(MODEL_NEW)
    (ws / "kernels" / "scale_add.cu").write_text(KERNEL_V1)
    v1 = history.commit_version(
        Verdict(
            status="correct",
            correct=True,
            reward=2,
            timing=_timing(0.0091),
            eager=_timing(0.0104),
            compiled=_timing(0.0073),
            speedup_vs_eager=1.14,
            speedup_vs_compile=0.80,
        )
    )
    (ws / "kernels" / "scale_add.cu").write_text(KERNEL_V2)
    v2 = history.commit_version(
        Verdict(
            status="correct",
            correct=True,
            reward=best_reward,
            timing=_timing(0.0078),
            eager=_timing(0.0104),
            compiled=_timing(0.0073),
            speedup_vs_eager=1.33,
            speedup_vs_compile=0.94,
        )
    )
    v3 = history.commit_version(
        Verdict(
            status="guard_violation",
            reward=-1,
            findings=[Finding(guard="torch_compute", message="aten::add.Tensor ran in forward")],
        )
    )

    w = TrajectoryWriter(run / "trajectory.jsonl")
    w.write(
        Header(
            time=T0,
            run_id="scale_add-demo",
            task=TaskInfo(path="model.py", class_name="Model", hash="0" * 16, name="scale_add"),
            model="scripted-demo",
            config={"agent": {"max_steps": 20, "max_cost": 1.0}},
            messages=[
                {"role": "system", "content": "You write CUDA kernels that beat torch.compile."},
                {"role": "user", "content": "Optimise this module:\n" + MODEL},
            ],
            tools=[
                {
                    "type": "function",
                    "function": {"name": n, "description": n, "parameters": {"type": "object", "properties": {}}},
                }
                for n in ("edit_file", "benchmark", "verify", "finish")
            ],
        )
    )
    steps = [
        (
            "I write a fused kernel.",
            "edit_file",
            {"mode": "create", "path": "kernels/scale_add.cu"},
            "created kernels/scale_add.cu (11 lines, 512 B)",
            "ok",
            None,
        ),
        (
            "Benchmark it.",
            "benchmark",
            {},
            "status: correct (reward 2)\ntime: 0.0091 ms\nspeedup: 1.14x vs eager, "
            "0.80x vs torch.compile\nversion 1 committed",
            "ok",
            (1, v1),
        ),
        (
            "Larger blocks.",
            "edit_file",
            {"mode": "create", "path": "kernels/scale_add.cu", "overwrite": True},
            "overwrote kernels/scale_add.cu (11 lines, 512 B)",
            "ok",
            None,
        ),
        (
            "Benchmark again.",
            "benchmark",
            {},
            f"status: correct (reward {best_reward})\ntime: 0.0078 ms\n"
            "speedup: 1.33x vs eager, 0.94x vs torch.compile\nversion 2 committed",
            "ok",
            (2, v2),
        ),
        (
            "Try torch for the add.",
            "verify",
            {},
            "status: guard_violation (reward -1)\ntorch_compute: aten::add.Tensor ran in forward\nversion 3 committed",
            "error",
            (3, v3),
        ),
        ("Done.", "finish", {"summary": "fused, 512-thread blocks"}, "finished", "ok", None),
    ]
    for n, (text, tool, args, obs, status, version) in enumerate(steps, 1):
        t = T0 + 10 * n
        w.write(
            ModelTurn(
                time=t,
                step=n,
                content=text,
                prompt_tokens=1000 * n,
                completion_tokens=100,
                cost=0.01,
                tool_calls=[CallRecord(id=f"call-{n}", name=tool, arguments=json.dumps(args))],
            )
        )
        w.write(
            ToolResultRecord(
                time=t + 1, step=n, call_id=f"call-{n}", name=tool, observation=obs, status=status, seconds=1.5
            )
        )
        if version is not None:
            number, info = version
            w.write(
                Evaluation(
                    time=t + 1,
                    step=n,
                    commit=info.sha,
                    version=number,
                    status=info.status,
                    reward=info.reward,
                    time_ms=info.time_ms,
                    eager_ms=info.eager_ms,
                    compile_ms=info.compile_ms,
                    speedup_eager=info.speedup_eager,
                    speedup_compile=info.speedup_compile,
                )
            )
        if n == 3:
            w.write(UserMessage(time=t + 2, step=n, content="keep fp32 everywhere"))
    w.write(
        Closing(
            time=T0 + 100,
            stop_reason="finished",
            best_version=2,
            best_commit=v2.sha,
            best_reward=best_reward,
            steps=6,
            tokens=27600,
            cost=0.06,
            wall_s=95.0,
        )
    )
    w.close()
    os.utime(run, (T0, T0))
    return run
