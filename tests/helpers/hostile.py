"""What a hostile model_new.py does to the judge from Python (the review's attacks, and more),
as preludes and forwards that tests put into a copy of an honest candidate."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

# reach the harness's modules through torch's own attributes and replace its recorded forward,
# its checks, its timer and its clocks
PATCHES = """
import time as _t
_sys = torch.sys
for _name, _mod in list(_sys.modules.items()):
    if _name.startswith("cuda_agent"):
        for _attr in ("time_callable", "RepTimer", "aten_findings", "check_set", "compare_output", "wall_clock_bound",
                      "milestone_reward", "mutated_inputs", "kernel_findings"):
            if hasattr(_mod, _attr):
                setattr(_mod, _attr, lambda *a, **k: None)
_t.perf_counter = lambda: 0.0
_t.time = lambda: 0.0
torch.cuda.synchronize = lambda *a, **k: None
"""
# `torch.os.kill(torch.os.getppid(), 9)` at import killed the agent before; and every pid it can name
KILLS = (
    "_os = torch.os\nfor _pid in {_os.getppid(), 1, -1}:\n    try:\n        _os.kill(_pid, 9)\n"
    "    except OSError:\n        pass\n"
)


def hostile_copy(honest: Path, dest: Path, prelude: str, forward_body: str | None = None) -> Path:
    """`honest` copied to `dest` with `prelude` run right after load_kernels() and, when given,
    forward's body replaced by `forward_body` (indented as a method body)."""
    shutil.copytree(honest, dest, ignore=shutil.ignore_patterns("__pycache__"))
    src = (dest / "model_new.py").read_text()
    src = src.replace("kernels = kernel_runtime.load_kernels()", "kernels = kernel_runtime.load_kernels()\n" + prelude)
    if forward_body is not None:
        head, _, _ = src.partition("    def forward(")
        sig = src[len(head) :].split("\n", 1)[0]
        src = head + sig + "\n" + forward_body + "\n"
    (dest / "model_new.py").write_text(src)
    return dest


def judge_clock_reads_low(monkeypatch, factor: float = 1000.0, less_ms: Callable[[], float] = lambda: 0.0) -> None:
    """As if native code in the judge had slowed its clocks, or written its own answers: every
    timed batch comes back with events `factor` times faster than the parent's clock saw, less
    `less_ms()` first (a forger's guess at the calibrated overhead: then its events sit just under
    the parent's figure). What the parent must catch, or never count."""
    from cuda_agent.eval import channel, clocked

    real_send, real_answer = channel.JailedChild.send, channel.JailedChild.answer
    started: dict[int, float] = {}

    def send(self, req, lend=None):
        if req.op == "batch":
            started[id(self)] = clocked.time.perf_counter()
        return real_send(self, req, lend)

    def answer(self, req, timeout):
        resp = real_answer(self, req, timeout)
        if req.op in ("batch", "settle") and resp.ok:  # on a GPU the queued batch's events come with Settle
            took = (clocked.time.perf_counter() - started[id(self)]) * 1e3
            resp.event_ms = max(took - less_ms(), 0.0) / factor  # the batch's events, as the judge reports them
        return resp

    monkeypatch.setattr(channel.JailedChild, "send", send)
    monkeypatch.setattr(channel.JailedChild, "answer", answer)
