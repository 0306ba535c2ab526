"""Peak GPU memory of one `cuda-agent eval`, all its processes, against the task's own eager peak.

For each task: the eager peak first (a fresh process: parameters + one input set + one eager
forward, torch's max_memory_allocated plus its CUDA context as NVML sees it), then one
`cuda-agent eval --json` while a sampler reads every process's GPU memory from NVML every 20 ms.
It prints, per task: the input size, the eager peak, the harness's peak (the largest sum over its
processes at one sample), the peak of each process (named by its command line), the ratio to the
eager peak (the goal is <= 4x), which processes held what at the harness's peak, the verdict and
the wall time; the JSON adds each process's use over time (a point whenever one moved by 0.5 GB).
One evaluation at a time.

    python benchmarks/memory_peak.py --kernelbench KB_CHECKOUT [--tasks 19_ReLU,23_Softmax,...]
        [--examples] [--extra "--memory-budget 80"] [--json-out FILE]

The candidates for the four large level-1 tasks are in benchmarks/kernelbench_l1/; `--examples`
adds examples/*/ with their hand-written candidates.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LARGE = ["19_ReLU", "23_Softmax", "36_RMSNorm_", "40_LayerNorm"]

EAGER_PEAK = r"""
import json, sys, torch, pynvml
from cuda_agent.task import load_task
task = load_task(sys.argv[1])
torch.cuda.init()
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
model = task.build_model(task.init_inputs(), "cuda:0")
inputs = task.draw_inputs(0, "cuda:0")
in_bytes = sum(x.numel() * x.element_size() for x in inputs if torch.is_tensor(x))
with torch.no_grad():
    out = model(*inputs)
torch.cuda.synchronize()
mine = [p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h) if p.pid == __import__("os").getpid()]
print(json.dumps({"input_gb": in_bytes / 1e9, "torch_peak_gb": torch.cuda.max_memory_allocated() / 1e9,
                  "process_gb": (mine[0] if mine and mine[0] else 0) / 1e9}))
"""


def label(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return f"pid {pid} (gone)"
    for key in ("cuda_agent.cli", "recorder", "judge", "baseline", "worker"):  # the CLI's flags may say "baseline"
        if key in cmd:
            return {"cuda_agent.cli": "parent"}.get(key, key)
    return cmd[:60]


class Sampler(threading.Thread):
    """NVML's per-process GPU memory every `period` seconds, until stopped."""

    def __init__(self, period: float = 0.02):
        super().__init__(daemon=True)
        import pynvml

        pynvml.nvmlInit()
        self.nvml, self.h, self.period = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0), period
        self.base = {p.pid for p in self._procs()}
        self.stop, self.total_peak, self.per_pid, self.names = threading.Event(), 0, {}, {}
        # which processes made the peak, and each process's use over time (a point whenever one
        # moved by 0.5 GB): what the harness holds in which phase
        self.at_peak: dict[int, int] = {}
        self.timeline: list[tuple[float, dict[int, int]]] = []
        self.t0 = time.monotonic()

    def _procs(self):
        return self.nvml.nvmlDeviceGetComputeRunningProcesses(self.h)

    def gb(self, by_pid: dict[int, int], digits: int | None = None) -> dict[str, float]:
        """{"judge 1234": GB} for bytes by pid (named by their command line)."""
        return {
            f"{self.names.get(pid, pid)} {pid}": b / 1e9 if digits is None else round(b / 1e9, digits)
            for pid, b in by_pid.items()
        }

    def run(self) -> None:
        while not self.stop.is_set():
            total, now = 0, {}
            for p in self._procs():
                if p.pid in self.base or not p.usedGpuMemory:
                    continue
                total += p.usedGpuMemory
                now[p.pid] = p.usedGpuMemory
                if p.usedGpuMemory > self.per_pid.get(p.pid, 0):
                    self.per_pid[p.pid] = p.usedGpuMemory
                if p.pid not in self.names:
                    self.names[p.pid] = label(p.pid)
            if total > self.total_peak:
                self.total_peak, self.at_peak = total, now
            last = self.timeline[-1][1] if self.timeline else {}
            if now.keys() != last.keys() or any(abs(v - last[k]) > 5e8 for k, v in now.items()):
                self.timeline.append((round(time.monotonic() - self.t0, 2), now))
            time.sleep(self.period)


def task_name(task: Path) -> str:
    """KernelBench files by their stem; an example's model.py by its folder ("examples/layernorm")."""
    return f"{task.parent.parent.name}/{task.parent.name}" if task.stem == "model" else task.stem


def measure(task: Path, candidate: Path, extra: list[str]) -> dict:
    eager = subprocess.run([sys.executable, "-c", EAGER_PEAK, str(task)], capture_output=True, text=True, timeout=600)
    if eager.returncode:
        return {"task": task_name(task), "error": "eager peak: " + eager.stderr.strip().splitlines()[-1]}
    row = {"task": task_name(task), **json.loads(eager.stdout.strip().splitlines()[-1])}
    sampler = Sampler()
    sampler.start()
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuda_agent.cli",
            "eval",
            str(task),
            "--candidate",
            str(candidate),
            "--json",
            "--no-server",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    row["wall_s"] = round(time.monotonic() - t0, 1)
    sampler.stop.set()
    sampler.join()
    row["exit_code"] = proc.returncode
    try:
        out = json.loads(proc.stdout)
        v = out["verdict"]
        row["verdict"] = f"{v['status']} (reward {v['reward']})" + (f": {v.get('error')}" if v.get("error") else "")
        row["findings"] = [f"{f['guard']}: {f['message']}" for f in v.get("findings") or []]
        row["reported_peaks_gib"] = v.get("memory_gib")
    except (ValueError, KeyError, TypeError):
        row["verdict"] = "no JSON verdict: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
    row["harness_peak_gb"] = sampler.total_peak / 1e9
    row["per_process_gb"] = sampler.gb(sampler.per_pid)
    row["at_peak_gb"] = sampler.gb(sampler.at_peak, 2)
    row["timeline_gb"] = [[t, sampler.gb(now, 1)] for t, now in sampler.timeline]
    eager_gb = max(row["torch_peak_gb"], 1e-9)
    row["ratio_to_eager"] = row["harness_peak_gb"] / max(row["process_gb"], eager_gb)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernelbench", type=Path, help="a KernelBench checkout (its KernelBench/level1/)")
    ap.add_argument("--tasks", default=",".join(LARGE))
    ap.add_argument("--examples", action="store_true")
    ap.add_argument("--extra", default="", help="more flags for cuda-agent eval")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    jobs = []
    if args.kernelbench:
        level1 = args.kernelbench / "KernelBench" / "level1"
        if not level1.is_dir():
            level1 = args.kernelbench / "level1"
        jobs += [(level1 / f"{t}.py", ROOT / "benchmarks" / "kernelbench_l1" / t) for t in args.tasks.split(",") if t]
    if args.examples:
        jobs += [
            (ex / "model.py", ex / "candidate")
            for ex in sorted((ROOT / "examples").iterdir())
            if (ex / "candidate").is_dir()
        ]
    rows = []
    for task, cand in jobs:
        row = measure(task, cand, shlex.split(args.extra))
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1))
    print(
        "\n| task | input GB | eager peak GB | harness peak GB | ratio "
        "| per process GB | at the peak GB | verdict | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['task']} | {r['error']} |")
            continue
        procs = ", ".join(
            f"{k.split()[0]} {v:.1f}" for k, v in sorted(r["per_process_gb"].items(), key=lambda kv: -kv[1])
        )
        at = " + ".join(f"{k.split()[0]} {v:.1f}" for k, v in r["at_peak_gb"].items())
        print(
            f"| {r['task']} | {r['input_gb']:.2f} | {max(r['torch_peak_gb'], r['process_gb']):.2f} | "
            f"{r['harness_peak_gb']:.1f} | {r['ratio_to_eager']:.1f}x | {procs} | {at} | {r['verdict'][:70]} | "
            f"{r['wall_s']} |"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
