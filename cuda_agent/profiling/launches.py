"""ncu's launches grouped by kernel, and whose each kernel is: the candidate's own (a __global__
in its kernels/ sources, as the build's launchers.json lists them), a library's (cuBLAS, cuDNN,
torch) or neither. A forward that calls cuBLAS six times gives one group of six launches with one
set of numbers (its longest launch's) and one total, not six copies of the same advice."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.eval.dynamic_guards import kernel_base, library_of
from cuda_agent.profiling.ncu_csv import KernelProfile
from cuda_agent.profiling.runner import short_name

OWN = "yours"
OTHER = "not in your kernels/"


@dataclass
class KernelGroup:
    name: str  # short_name of the launches (template arguments kept: another instantiation is another kernel)
    origin: str  # OWN, a library ("cuBLAS", "cuDNN", "torch") or OTHER
    launches: list[KernelProfile]  # in launch order

    @property
    def own(self) -> bool:
        return self.origin == OWN

    @property
    def library(self) -> bool:
        return not self.own and self.origin != OTHER

    @property
    def total_us(self) -> float:
        return sum(k.duration_us or 0.0 for k in self.launches)

    @property
    def longest(self) -> KernelProfile:
        return max(self.launches, key=lambda k: k.duration_us or 0.0)

    def summary(self) -> dict:
        return {
            "name": self.name,
            "origin": self.origin,
            "launches": len(self.launches),
            "total_us": round(self.total_us, 3),
            "ids": [k.id for k in self.launches],
        }


def own_kernels(build_dir: Path) -> list[str] | None:
    """The __global__ kernels the build's launchers.json lists; None when it cannot be read."""
    from cuda_agent.kernels.launchers import SPEC_NAME

    try:
        spec = json.loads((Path(build_dir) / SPEC_NAME).read_text())
    except (OSError, ValueError):
        return None
    kernels = spec.get("kernels") if isinstance(spec, dict) else None
    return [str(k) for k in kernels] if isinstance(kernels, list) else None


def origin(name: str, own: list[str] | None) -> str:
    """OWN when the kernel's identifier is one of `own`; else the library its name looks like; else
    OTHER. With `own` unknown (None), a kernel no library claims is counted as the candidate's."""
    if own is not None and kernel_base(name) in own:
        return OWN
    return library_of(name) or (OWN if own is None else OTHER)


def group_launches(kernels: list[KernelProfile], own: list[str] | None) -> list[KernelGroup]:
    """One group per kernel name, the most total time first (ties: the first launched first)."""
    groups: dict[str, KernelGroup] = {}
    for k in kernels:
        name = short_name(k.name)
        groups.setdefault(name, KernelGroup(name, origin(k.name, own), [])).launches.append(k)
    return sorted(groups.values(), key=lambda g: -g.total_us)


def not_launched(groups: list[KernelGroup], own: list[str] | None) -> list[str]:
    """The candidate's kernels that no launch in this forward ran."""
    ran = {kernel_base(k.name) for g in groups if g.own for k in g.launches}
    return [name for name in own or [] if name not in ran]


def time_by_origin(groups: list[KernelGroup]) -> dict[str, tuple[float, int]]:
    """origin -> (total us, launches), the most time first."""
    out: dict[str, tuple[float, int]] = {}
    for g in groups:
        us, n = out.get(g.origin, (0.0, 0))
        out[g.origin] = (us + g.total_us, n + len(g.launches))
    return dict(sorted(out.items(), key=lambda kv: -kv[1][0]))
