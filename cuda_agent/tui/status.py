"""The app's bottom line: model, step, cost, elapsed time, the GPU and what the agent is doing
(what takes a while now too: an evaluation's phase, the re-verification after the run ended)."""

from __future__ import annotations

import time

from rich.text import Text

from cuda_agent.control import agent_activity
from cuda_agent.tui.run_view import RunView

GPU_REFRESH_S = 2.0  # NVML is asked at most this often, not on every poll


def status_line(view: RunView, state, gpu: str, deferred: bool) -> Text:
    """`state`: the agent's control state as this tick read it (None: no agent has run here);
    `deferred`: a person put off deciding a pending call."""
    limits = view.limits()
    model = view.header.model if view.header else "?"
    cost = f"${view.cost:.2f}" if view.priced else "$?"
    if limits.get("max_cost"):
        cost += f"/{limits['max_cost']:.2f}"
    elapsed = time.strftime("%H:%M:%S", time.gmtime(view.elapsed_s()))
    busy = agent_activity(state)  # what takes a while now, while the agent's process is alive
    if view.closing is not None and (state is None or not state.running):
        # after its closing record the process still re-verifies the result and writes the report
        where = f"ended ({view.closing.stop_reason}); {busy}" if busy else f"stopped: {view.closing.stop_reason}"
    elif state is None or not view.live(state):
        where = "not running (r resumes)" if view.header else "starting"
    elif state.pending:
        where = "waiting for approval" + (" (o decides)" if deferred else "")
    elif state.stopping:
        where = "stopping"
    elif state.paused:
        where = "paused"
    else:
        where = "running" + (" (approve mode)" if state.approve_mode else "") + (f": {busy}" if busy else "")
    return Text(
        f"{model} | step {view.last_step()}/{limits.get('max_steps', '?')} | {cost} | {elapsed} | {gpu} | {where}"
    )


class GpuStatus:
    """GPU 0's name and utilisation, read again at most every GPU_REFRESH_S; "GPU: -" when off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._text, self._at = "", 0.0

    def text(self) -> str:
        if not self.enabled:
            return "GPU: -"
        if time.monotonic() - self._at > GPU_REFRESH_S:
            self._at, self._text = time.monotonic(), _read_gpu()
        return self._text


def _read_gpu() -> str:
    """Through NVML; says so when there is no GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else name
        return f"{name.replace('NVIDIA ', '')} {pynvml.nvmlDeviceGetUtilizationRates(h).gpu}%"
    except Exception:
        return "no GPU"
