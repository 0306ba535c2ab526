"""Whether a scripted session can be replayed on the CPU. A script whose kernels launch on a GPU says
so in its file ("needs_gpu": true, and its host-only twin in "cpu_variant", a path beside it): with
--device cpu every version it builds would be a runtime error, so `optimize` stops at once, before
any run folder, and names the twin's command instead of ending "no correct version"."""

from __future__ import annotations

import json
from pathlib import Path


def cpu_refusal(script: Path, task: str | None) -> str | None:
    """One line saying `script` needs a GPU and what to run instead, or None (it does not say so, or
    it cannot be read: the script's own check reports that). `task`: the task as given (None: a resume)."""
    try:
        doc = json.loads(Path(script).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("needs_gpu") is not True:
        return None
    why = f"{script} writes kernels that launch on a GPU, and --device cpu runs launchers on the host"
    variant = doc.get("cpu_variant")
    if not isinstance(variant, str) or not variant or task is None:
        return f"{why}: run it on a machine with a GPU"
    twin = Path(script).parent / variant
    return (
        f"{why}: run it on a machine with a GPU, or replay its host-only twin: "
        f"`cuda-agent optimize {task} --script {twin} --device cpu --no-compile-baseline`"
    )
