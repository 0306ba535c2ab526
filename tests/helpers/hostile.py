"""What a hostile model_new.py does to the judge from Python (the review's attacks, and more),
as preludes and forwards that tests put into a copy of an honest candidate."""

from __future__ import annotations

import shutil
from pathlib import Path

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


def judge_clock_reads_low(monkeypatch, factor: float = 1000.0) -> None:
    """As if native code in the judge had slowed its clocks: every time the judge reports for the
    measured loop is `factor` times too small (what the parent's own clock must catch)."""
    from cuda_agent.eval import channel

    real = channel.JailedChild.request

    def lying(self, req, timeout):
        resp = real(self, req, timeout)
        if req.op == "time_loop" and resp.ok:
            t = resp.timing
            for k in ("median_ms", "mean_ms", "min_ms", "max_ms", "p20_ms", "p80_ms", "host_median_ms"):
                t[k] = t[k] / factor if t.get(k) else t.get(k)
        return resp

    monkeypatch.setattr(channel.JailedChild, "request", lying)
