"""Where the candidate sits on the roofline: the task's FLOPs and the fewest bytes it must move,
against the GPU's peaks, give a time floor to compare the measured kernel time with. FLOPs come
from one reference forward under torch's FlopCounterMode, on the meta device where it can (no
memory, GPU or time), else on the CPU; it counts matmul, conv and attention, not elementwise work
(an elementwise task has a memory floor only). The fewest bytes: every input, output, parameter
and buffer once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from pydantic import BaseModel

TENSOR_DTYPES = ("bfloat16", "float16")  # what the dense tensor-core peak applies to


@dataclass(frozen=True)
class Peaks:
    gpu: str
    fp32_tflops: float  # CUDA cores (FMA), what an fp32 task may use: TF32 is a precision downgrade
    tensor_tflops: float  # bf16/fp16 dense tensor cores
    hbm_tbps: float
    source: str  # "datasheet" or "settings"


# NVIDIA datasheet peaks (SXM boards, boost clock, dense), not measured here: settings override them
DATASHEET = {
    "H200": Peaks("H200 SXM", 67.0, 990.0, 4.8, "datasheet"),
    "H100": Peaks("H100 SXM", 67.0, 990.0, 3.35, "datasheet"),
}
OVERRIDES = {"peak_fp32_tflops": "fp32_tflops", "peak_tensor_tflops": "tensor_tflops", "peak_hbm_tbps": "hbm_tbps"}


class TaskCost(BaseModel):
    flops: float
    bytes: float  # inputs + outputs + parameters + buffers, each once
    dtype: str  # of the task's floating tensors, e.g. "float32"
    device: str  # where it was counted


class Roofline(BaseModel):
    intensity: float  # FLOP per byte
    ridge: float  # the intensity where the two roofs meet
    compute_floor_us: float
    memory_floor_us: float
    measured_us: float | None = None

    @property
    def floor_us(self) -> float:
        return max(self.compute_floor_us, self.memory_floor_us)

    @property
    def bound(self) -> str:
        return "compute-bound" if self.intensity > self.ridge else "memory-bound"


def detect_gpu_name() -> str | None:
    """GPU 0's name through NVML (no CUDA context in this process), None without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no library, no driver, no device: all mean "unknown"
        return None
    return name.decode() if isinstance(name, bytes) else str(name)


def gpu_peaks(gpu_name: str | None, settings: Mapping[str, float | None] | None = None) -> Peaks | None:
    """The datasheet row for the GPU (H200 before H100: names are substrings), with any of the
    peak_* settings given (ToolSettings) taking over; None when neither knows the GPU."""
    settings = settings or {}
    base = next((p for key, p in DATASHEET.items() if gpu_name and key in gpu_name.upper()), None)
    given = {field: float(settings[key]) for key, field in OVERRIDES.items() if settings.get(key)}
    if not given:
        return base
    if base is None and len(given) < len(OVERRIDES):
        return None
    return Peaks(**{"gpu": gpu_name or "GPU", **(base.__dict__ if base else {}), **given, "source": "settings"})


@dataclass(frozen=True)
class GpuFacts:
    """What the task message says about the GPU evaluations run on."""

    name: str | None  # None: NVML could not name it
    arch: str  # what nvcc builds for, e.g. sm_90a
    peaks: Peaks | None  # None: neither the datasheet table nor the settings know this GPU


def gpu_facts(
    device: str,
    *,
    gpu_name: str | None = None,
    arch: str | None = None,
    settings: Mapping[str, float | None] | None = None,
) -> GpuFacts | None:
    """The GPU as the roofline and the build see it: its name (NVML's GPU 0 unless `gpu_name` is set), arch and
    datasheet or settings peaks; None for a device that is not a GPU (cpu: the tests' host-only mode)."""
    if not device.startswith("cuda"):
        return None
    from cuda_agent.kernels.toolkit import detect_arch

    name = gpu_name or detect_gpu_name()
    return GpuFacts(name=name, arch=arch or detect_arch(), peaks=gpu_peaks(name, settings))


def task_flops_bytes(task, device: str = "meta") -> TaskCost:
    """One forward of the reference `task` under FlopCounterMode on `device`."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model = task.build_model(task.init_inputs(0), device, 0)
    inputs = task.draw_inputs(1, device)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(*inputs)
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)] + _tensors(out)
    state = list(model.parameters()) + list(model.buffers())
    nbytes = sum(t.numel() * t.element_size() for t in tensors + state)
    floating = next((t.dtype for t in tensors + state if t.is_floating_point()), torch.float32)
    return TaskCost(
        flops=float(counter.get_total_flops()),
        bytes=float(nbytes),
        dtype=str(floating).removeprefix("torch."),
        device=device,
    )


def count_task(task) -> TaskCost:
    """task_flops_bytes on meta, or on the CPU where an op has no meta kernel."""
    try:
        return task_flops_bytes(task, "meta")
    except Exception:  # data-dependent ops, .item(), inputs made on an explicit device
        return task_flops_bytes(task, "cpu")


def _tensors(out) -> list:
    import torch

    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return [out] if isinstance(out, torch.Tensor) else []


def roofline(cost: TaskCost, peaks: Peaks, measured_us: float | None = None) -> Roofline:
    flops_per_s = (peaks.tensor_tflops if cost.dtype in TENSOR_DTYPES else peaks.fp32_tflops) * 1e12
    bytes_per_s = peaks.hbm_tbps * 1e12
    return Roofline(
        intensity=cost.flops / cost.bytes if cost.bytes else 0.0,
        ridge=flops_per_s / bytes_per_s,
        compute_floor_us=cost.flops / flops_per_s * 1e6,
        memory_floor_us=cost.bytes / bytes_per_s * 1e6,
        measured_us=measured_us,
    )


def roofline_text(cost: TaskCost, peaks: Peaks | None, measured_us: float | None = None) -> str:
    """2-4 lines for the model."""
    note = "; FLOPs counted for matmul, conv and attention only" if not cost.flops else ""
    work = f"the task does {_si(cost.flops, 'FLOP')} on at least {_si(cost.bytes, 'B')} ({cost.dtype}{note})"
    if peaks is None:
        return (
            f"roofline: {work}.\nno peak numbers for this GPU: set peak_fp32_tflops, peak_tensor_tflops "
            "and peak_hbm_tbps in the settings to get time floors"
        )
    r = roofline(cost, peaks, measured_us)
    kind = "tensor-core" if cost.dtype in TENSOR_DTYPES else "fp32 non-tensor"
    flops_peak = peaks.tensor_tflops if cost.dtype in TENSOR_DTYPES else peaks.fp32_tflops
    lines = [
        f"roofline on {peaks.gpu} ({peaks.source} peaks: {flops_peak:g} TFLOP/s {kind}, {peaks.hbm_tbps:g} TB/s "
        f"HBM): {work} -> {r.intensity:.2f} FLOP/B vs ridge {r.ridge:.1f}: {r.bound}",
        f"time floors: compute {r.compute_floor_us:.1f} us, memory {r.memory_floor_us:.1f} us",
    ]
    if measured_us:
        lines.append(
            f"measured {measured_us:.1f} us of kernels = {measured_us / r.floor_us:.2f}x the floor "
            f"({100 * r.floor_us / measured_us:.0f}% of the roofline)"
        )
    return "\n".join(lines)


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.0f} {unit}"
