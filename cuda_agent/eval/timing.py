"""Time one callable the way a kernel engineer would trust (runs inside a worker process).

Per rep: whole-device synchronize, flush L2 (write a buffer twice its size), a short spin kernel
that holds the stream (`hold_ms`, as nvbench's blocking kernel) while the forward's launches are
queued behind it, CUDA events around the call on the current stream, synchronize again. The
events then time the forward's device work, not the GPU idling while Python queues launches; a
forward that takes longer than the hold to queue is timed with its launch gaps, as it would run. Input sets rotate between reps so nothing
keyed on a pointer or the last call looks fast. Event time is the figure; the host time of the
synchronized rep is kept beside it, so work on side streams or threads (which events on the
current stream miss) shows up as a gap between the two.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence

from pydantic import BaseModel


class TimingConfig(BaseModel):
    warmup_ms: float = 100.0  # at least this long (and 3 calls): clocks ramp up from idle
    min_reps: int = 20
    max_reps: int = 300
    budget_ms: float = 1500.0  # aim the timed loop at about this much device time
    flush_l2: bool = True
    hold_ms: float = 0.2  # spin kernel before each rep's start event; 0 turns it off


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    k = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[k]


def summarize(times_ms: list[float], host_ms: list[float], warmup: int, sets: int) -> dict:
    return {
        "median_ms": statistics.median(times_ms),
        "mean_ms": statistics.fmean(times_ms),
        "min_ms": min(times_ms),
        "max_ms": max(times_ms),
        "p20_ms": _percentile(times_ms, 0.2),
        "p80_ms": _percentile(times_ms, 0.8),
        "reps": len(times_ms),
        "warmup": warmup,
        "input_sets": sets,
        "host_median_ms": statistics.median(host_ms) if host_ms else None,
    }


def _stream_holder(spin: Callable[[int], None] | None, event_cls: Any, synchronize: Callable[[], None],
                   hold_ms: float) -> Callable[[], None] | None:
    """A callable that queues a spin kernel of about `hold_ms` on the current stream, calibrated
    here with events (cycles per ms differ by GPU and clock); None where torch has no spin kernel."""
    if spin is None or hold_ms <= 0:
        return None
    probe = 200_000
    start, end = event_cls(enable_timing=True), event_cls(enable_timing=True)
    spin(probe)  # the first launch loads the kernel
    start.record()
    spin(probe)
    end.record()
    synchronize()
    ms = start.elapsed_time(end)
    if ms <= 0:
        return None
    cycles = max(1, int(probe * hold_ms / ms))
    return lambda: spin(cycles)


def time_callable(
    fn: Callable[..., Any],
    input_sets: Sequence[Sequence[Any]],
    device: str,
    cfg: TimingConfig,
    *,
    synchronize: Callable[[], None] | None = None,
    event_cls: Any = None,
    perf_counter: Callable[[], float] = time.perf_counter,
    spin: Callable[[int], None] | None = None,
) -> tuple[dict, list[Any]]:
    """Returns (timing summary, the last output of each input set).

    `synchronize`, `event_cls`, `perf_counter` and `spin` are the worker's own references, taken
    before the candidate was imported, so a candidate that patches torch's cannot fool them.
    The host time of a rep leaves out the hold, so it still shows work that outlasts the events.
    """
    import torch

    on_cuda = device.startswith("cuda")
    if on_cuda:
        synchronize = synchronize or torch.cuda.synchronize
        event_cls = event_cls or torch.cuda.Event
        l2 = torch.cuda.get_device_properties(device).L2_cache_size or (64 << 20)
        flush_buf = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device) if cfg.flush_l2 else None
        hold = _stream_holder(spin or getattr(torch.cuda, "_sleep", None), event_cls, synchronize, cfg.hold_ms)
    else:
        synchronize = synchronize or (lambda: None)
        flush_buf, hold = None, None
    hold_ms = cfg.hold_ms if hold is not None else 0.0
    last: list[Any] = [None] * len(input_sets)

    def one_rep(i: int) -> tuple[float, float]:
        k = i % len(input_sets)
        synchronize()
        if flush_buf is not None:
            flush_buf.zero_()
        if hold is not None:  # the device is still busy with the flush and the hold while we queue
            hold()
        h0 = perf_counter()
        if on_cuda:
            start, end = event_cls(enable_timing=True), event_cls(enable_timing=True)
            start.record()
            last[k] = fn(*input_sets[k])
            end.record()
            synchronize()
            h1 = perf_counter()
            return start.elapsed_time(end), max((h1 - h0) * 1e3 - hold_ms, 0.0)
        last[k] = fn(*input_sets[k])
        h1 = perf_counter()
        return (h1 - h0) * 1e3, (h1 - h0) * 1e3

    warm, t0 = 0, perf_counter()
    est: list[float] = []
    while warm < 3 or (perf_counter() - t0) * 1e3 < cfg.warmup_ms:
        est.append(one_rep(warm)[0])
        warm += 1
        if warm >= 1000:
            break
    per_call = max(statistics.median(est), 1e-3)
    reps = int(min(cfg.max_reps, max(cfg.min_reps, cfg.budget_ms / per_call)))
    times, host = [], []
    for i in range(reps):
        t, h = one_rep(i)
        times.append(t)
        host.append(h)
    summary = summarize(times, host, warm, len(input_sets))
    summary["hold_ms"] = hold_ms
    return summary, last


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
