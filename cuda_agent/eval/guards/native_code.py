"""The host instructions of a candidate object, read back from the object itself (objdump -d).

The source guard keeps inline assembly in device code, but it reads source text before the
preprocessor: a macro, a `#if` or a name that shadows a type can make host code look like device
code to it. What such assembly can do that C++ cannot is in a few instructions: a system call with
no import the symbol audit sees (a thread, a timer, a mapping), a read of the CPU's counters. g++
never emits them for C++ on its own, so any of them in a candidate object's code is a finding,
whatever the source looked like.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

# x86-64: system calls and returns from them, software interrupts (int $0x80 is a system call),
# time-stamp and performance counters, and writes of the thread pointer's segment bases.
X86 = frozenset(
    {"syscall", "sysenter", "sysexit", "sysexitl", "sysexitq", "sysret", "sysretl", "sysretq", "int"}
    | {"rdtsc", "rdtscp", "rdpmc", "wrfsbase", "wrgsbase"}
)
# aarch64: supervisor/hypervisor/monitor calls, and reads of the timer and cycle counters.
ARM = frozenset({"svc", "hvc", "smc"})
_ARM_COUNTERS = re.compile(r"\bmrs\b.*\b(?:cntvct_el0|cntpct_el0|cntvctss_el0|cntpctss_el0|pmccntr_el0)\b", re.I)
_FUNCTION = re.compile(r"^[0-9a-f]+ <(.+)>:$")
# an instruction line: its words, prefixes included (`rex.W syscall`, `fs rdtsc`, `repz syscall`)
_INSTRUCTION = re.compile(r"^\s*[0-9a-f]+:\s+(.*)$")
_WORD = re.compile(r"[a-z][\w.]*")


class NoDisassembler(RuntimeError):
    pass


def objdump() -> str:
    found = shutil.which("objdump")
    if found is None:
        raise NoDisassembler("objdump not found: install binutils (it comes with the host compiler nvcc uses)")
    return found


def forbidden_instructions(obj: Path) -> list[tuple[str, str]]:
    """(function, instruction) for each forbidden instruction in `obj`'s code sections, each once."""
    out = subprocess.run(
        [objdump(), "-d", "-C", "--no-show-raw-insn", "-w", str(obj)], capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        raise NoDisassembler(f"objdump could not read {obj.name}: {out.stderr.strip()[-200:]}")
    found: dict[tuple[str, str], None] = {}
    function = "?"
    for line in out.stdout.splitlines():
        if m := _FUNCTION.match(line):
            function = m.group(1)
        elif m := _INSTRUCTION.match(line):
            text = m.group(1).split("#")[0].split("//")[0].split("<")[0].strip()  # no comment, no symbol
            words = set(_WORD.findall(text.split(",")[0]))  # prefixes and mnemonic, before the operands
            if words & (X86 | ARM) or (_ARM_COUNTERS.search(text) and "mrs" in words):
                found[(function, text)] = None
    return list(found)
