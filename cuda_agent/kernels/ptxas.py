"""ptxas -v report -> resource numbers per kernel (registers, shared memory, spills, stack).

These are what a kernel engineer checks first: spills and a large stack frame mean local-memory
traffic, and registers and shared memory bound occupancy.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from cuda_agent.kernels.toolkit import demangle

_ENTRY = re.compile(r"^ptxas info\s*: Compiling entry function '(?P<name>[^']+)'")
_PROPS = re.compile(r"^ptxas info\s*: Function properties for (?P<name>\S+)")
_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
)
_USED = re.compile(r"^ptxas info\s*: Used (?P<regs>\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")


class PtxasInfo(BaseModel):
    file: str  # the .cu the kernel came from
    registers: int = 0
    shared_bytes: int = 0  # static shared memory (dynamic shared memory is set at launch)
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0


def parse_ptxas_report(text: str, file: str) -> dict[str, PtxasInfo]:
    """Kernel name (demangled, without parameters) -> its resources, from `nvcc -Xptxas -v` output."""
    entries: dict[str, PtxasInfo] = {}
    current: str | None = None  # the entry function the "Used N registers" line belongs to
    props_for: str | None = None  # the function whose "stack frame" line comes next
    for line in text.splitlines():
        if m := _ENTRY.match(line):
            current = m["name"]
            entries[current] = PtxasInfo(file=file)
        elif m := _PROPS.match(line):
            props_for = m["name"]
        elif (m := _FRAME.search(line)) and props_for in entries:
            info = entries[props_for]
            info.stack_bytes, info.spill_stores, info.spill_loads = int(m["stack"]), int(m["stores"]), int(m["loads"])
            props_for = None
        elif (m := _USED.match(line)) and current in entries:
            info = entries[current]
            info.registers = int(m["regs"])
            if smem := _SMEM.search(line):
                info.shared_bytes = int(smem[1])
            if barriers := _BARRIERS.search(line):
                info.barriers = int(barriers[1])
    short = demangle(list(entries), params=False)
    full = demangle(list(entries))
    names = list(short.values())
    # Overloads share a short name: fall back to the full signature for those.
    return {(short[n] if names.count(short[n]) == 1 else full[n]): info for n, info in entries.items()}
