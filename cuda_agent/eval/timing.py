"""Time one callable the way a kernel engineer would trust (runs inside a judge process).

Per rep: whole-device synchronize, flush L2 (write a buffer twice its size), a short spin kernel
that holds the stream (`hold_ms`, as nvbench's blocking kernel) while the forward's launches are
queued behind it, CUDA events around the call on the current stream, synchronize again. The
events then time the forward's device work, not the GPU idling while Python queues launches; a
forward that takes longer than the hold to queue is timed with its launch gaps, as it would run.
Input sets rotate between reps so nothing keyed on a pointer or the last call looks fast. Event
time is the figure; the host time of the synchronized rep is kept beside it, so work on side
streams or threads (which events on the current stream miss) shows up as a gap between the two.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence

from pydantic import BaseModel, ConfigDict


class TimingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt setting is an error, not ignored

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


def _stream_holder(
    spin: Callable[[int], None] | None, event_cls: Any, synchronize: Callable[[], None], hold_ms: float
) -> Callable[[], None] | None:
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


class RepTimer:
    """The timed rep of one callable over rotating input sets, in two phases: `warm_up()` (clocks
    ramp up; returns an estimate per call) and `measure(reps)` (exactly `reps` reps), so the parent
    can time the measured loop alone with its own clock and dictate how many reps it holds.

    `synchronize`, `event_cls`, `perf_counter` and `spin` are the judge's own references.
    The host time of a rep leaves out the hold, so it still shows work that outlasts the events.
    `before_rep(k)` runs before each rep on input set k, outside the measured region (the judge
    allocates and poisons the rep's outputs there).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        input_sets: Sequence[Sequence[Any]],
        device: str,
        cfg: TimingConfig,
        *,
        synchronize: Callable[[], None] | None = None,
        event_cls: Any = None,
        perf_counter: Callable[[], float] = time.perf_counter,
        spin: Callable[[int], None] | None = None,
        before_rep: Callable[[int], None] | None = None,
    ):
        import torch

        self.fn, self.input_sets, self.cfg, self.before_rep = fn, input_sets, cfg, before_rep
        self.on_cuda = device.startswith("cuda")
        self.perf_counter = perf_counter
        if self.on_cuda:
            self.synchronize = synchronize or torch.cuda.synchronize
            self.event_cls = event_cls or torch.cuda.Event
            l2 = torch.cuda.get_device_properties(device).L2_cache_size or (64 << 20)
            self.flush_buf = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device) if cfg.flush_l2 else None
            self.hold = _stream_holder(
                spin or getattr(torch.cuda, "_sleep", None), self.event_cls, self.synchronize, cfg.hold_ms
            )
        else:
            self.synchronize = synchronize or (lambda: None)
            self.event_cls, self.flush_buf, self.hold = None, None, None
        self.hold_ms = cfg.hold_ms if self.hold is not None else 0.0
        self.last: list[Any] = [None] * len(input_sets)
        self.warmup = 0

    def one_rep(self, i: int) -> tuple[float, float]:
        k = i % len(self.input_sets)
        self.last[k] = None  # this set's previous outputs: freed before its next buffers are allocated
        if self.before_rep is not None:
            self.before_rep(k)
        self.synchronize()
        if self.flush_buf is not None:
            self.flush_buf.zero_()
        if self.hold is not None:  # the device is still busy with the flush and the hold while we queue
            self.hold()
        h0 = self.perf_counter()
        if self.on_cuda:
            start, end = self.event_cls(enable_timing=True), self.event_cls(enable_timing=True)
            start.record()
            self.last[k] = self.fn(*self.input_sets[k])
            end.record()
            self.synchronize()
            h1 = self.perf_counter()
            return start.elapsed_time(end), max((h1 - h0) * 1e3 - self.hold_ms, 0.0)
        self.last[k] = self.fn(*self.input_sets[k])
        h1 = self.perf_counter()
        return (h1 - h0) * 1e3, (h1 - h0) * 1e3

    def warm_up(self) -> float:
        """At least `warmup_ms` and 3 calls; returns the median event time of a call (ms)."""
        t0, est = self.perf_counter(), []
        while self.warmup < 3 or (self.perf_counter() - t0) * 1e3 < self.cfg.warmup_ms:
            est.append(self.one_rep(self.warmup)[0])
            self.warmup += 1
            if self.warmup >= 1000:
                break
        return max(statistics.median(est), 1e-3)

    def reps_for(self, per_call_ms: float) -> int:
        return int(min(self.cfg.max_reps, max(self.cfg.min_reps, self.cfg.budget_ms / per_call_ms)))

    def measure(self, reps: int) -> dict:
        times, host = [], []
        for i in range(reps):
            t, h = self.one_rep(i)
            times.append(t)
            host.append(h)
        summary = summarize(times, host, self.warmup, len(self.input_sets))
        summary["hold_ms"] = self.hold_ms
        return summary


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
