"""How the parent times a call it cannot see into (docs/harness.md, "Timing").

The parent's clock is the measurement. A timed batch is R calls on inputs no earlier call saw,
laid out by the parent in a block it lends the judge when the batch is due (handover.py,
batch.py); the judge runs them back to back and synchronizes; the parent's clock runs from
lending the block to holding a copy of the outputs it checks. There is no idle window inside:
no stream hold, no flush, nothing the candidate's own work could fill unseen. What the protocol
itself costs (the round trip, mapping the block, the copy) is calibrated with the same layout
in a process that never loaded candidate code, and taken off. CUDA events the judge records
can make a figure slower where they read slower, never faster (clocked.figure).
"""

from __future__ import annotations

import statistics
from typing import Literal

from pydantic import BaseModel, ConfigDict


class TimingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt setting is an error, not ignored

    warmup_ms: float = 100.0  # warm-up batches (untimed) for at least this long: clocks ramp up from idle
    budget_ms: float = 300.0  # the measured batches aim at about this much device time in all
    batch_ms: float = 5.0  # each batch aims at this long, so the protocol's own cost is a small share
    min_batches: int = 5
    # 15: on an H200 two evaluations' medians agree within 0.1% at 30 on four of the five examples, and each
    # batch draws fresh inputs for every call (most of the timing phase's time): 30 cost 0.6 s more an edit
    max_batches: int = 15
    max_batch_reps: int = 4096  # calls in one batch at most (memory bounds it too)
    # how the warm-up picks R from a batch's length: "nearest" (R times the nearest whole ratio) or
    # "pow2" (the largest power of two at or under the estimate, so that evaluations whose warm-up
    # batches differ by noise still agree on R: docs/harness.md, "Timing")
    reps_rounding: Literal["nearest", "pow2"] = "nearest"


def next_reps(reps: int, wall_ms: float, cfg: TimingConfig, cap: int) -> int:
    """The calls per batch that would make a batch of `reps` calls, which lasted `wall_ms` by the
    parent's clock (overhead and all), last `cfg.batch_ms`; at most `cap` and `cfg.max_batch_reps`."""
    cap = max(1, min(cap, cfg.max_batch_reps))
    ratio = cfg.batch_ms / max(wall_ms, 1e-6)
    if cfg.reps_rounding == "pow2":
        return 1 << (max(1, min(cap, int(reps * ratio))).bit_length() - 1)
    return min(cap, reps * max(1, round(ratio)))


def resolving_reps(reps: int, work_ms: float, floor_ms: float, cap: int) -> int:
    """R for the next warm-up batch where a batch of `reps` calls held `work_ms` of work beyond the
    calibrated overhead: twice R (at most `cap`) while that is under `floor_ms`, else R."""
    return reps if work_ms >= floor_ms else max(reps, min(cap, 2 * reps))


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    k = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[k]


def summarize(per_call_ms: list[float], reps: int, warmup: int) -> dict:
    """The figures of a measured loop from each batch's time per call."""
    return {
        "median_ms": statistics.median(per_call_ms),
        "mean_ms": statistics.fmean(per_call_ms),
        "min_ms": min(per_call_ms),
        "max_ms": max(per_call_ms),
        "p20_ms": _percentile(per_call_ms, 0.2),
        "p80_ms": _percentile(per_call_ms, 0.8),
        "reps": reps,
        "warmup": warmup,
        "input_sets": reps,  # every timed call had inputs of its own
        "batches": len(per_call_ms),
    }


def read_clocks(device_index: int) -> dict[str, float]:
    """SM and memory clocks (MHz), temperature (C) and throttle reasons now, through NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        out = {
            "sm_mhz": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
            "mem_mhz": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
            "temp_c": float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
        }
        try:
            out["throttle_reasons"] = float(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
        except Exception:  # older drivers: not fatal, just less detail
            pass
        return out
    except Exception:
        return {}
