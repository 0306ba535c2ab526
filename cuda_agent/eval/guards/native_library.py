"""The native audit of the linked libkernels-<hash>.so (native.py has the overview).

Every library carries the static CUDA runtime, which itself imports dlopen, pthread_create,
getenv... and runs initialisers of its own. So the library's imports and load-time entries are
judged against that runtime's own (read from the toolkit's libcudart_static.a, once a process)
plus the allowlist; what the candidate's objects import is judged there, in native_object.py.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

from cuda_agent.eval.guards.native_elf import (
    IRELATIVE,
    RELATIVE,
    SHN_UNDEF,
    STB_LOCAL,
    STB_WEAK,
    STT_FUNC,
    STT_GNU_IFUNC,
    Elf,
    archive_members,
)
from cuda_agent.eval.guards.native_names import pretty
from cuda_agent.eval.guards.native_rules import (
    ARRAY_TYPES,
    EXIT_HOOKS,
    NEEDED_BASE,
    NEEDED_BY_LIB,
    STARTUP_FILES,
    STARTUP_FUNCS,
    STI,
    import_problem,
)


def audit_shared(
    elf: Elf,
    toolkit: tuple[frozenset[str], frozenset[str]],
    libs: set[str],
    extra: tuple[str, ...],
    accepted_init: set[str],
    n_objects: int,
) -> list[tuple[str, str, str]]:
    """The linked library: imports beyond the toolkit's own, needed libraries, load-time entries.

    Its big tables (the static CUDA runtime's ~4000 symbols and ~1000 relocations) are read raw and
    only the entries the checks need get a name."""
    toolkit_imports, toolkit_funcs = toolkit
    out: list[tuple[str, str, str]] = []  # (guard, symbol, message)

    def add(guard: str, message: str, symbol: str = "") -> None:
        out.append((guard, symbol, message))

    dynsyms = elf.symbols(".dynsym")
    for sym in dynsyms:
        name = sym.name
        if sym.shndx != SHN_UNDEF or not name or name in STARTUP_FILES or name in toolkit_imports:
            continue
        if name in EXIT_HOOKS or import_problem(name, libs, extra):
            weak = "a weak reference to " if sym.bind == STB_WEAK else ""
            add(
                "native_symbol",
                f"the library imports {weak}{name}, which neither the allowlist nor the CUDA "
                "runtime explains; a launcher may call the CUDA runtime, cuBLAS/cuDNN, libm and basic libc only",
                name,
            )
    for needed in elf.needed():
        if not needed.startswith(NEEDED_BASE) and not any(needed.startswith(NEEDED_BY_LIB[x]) for x in libs):
            add("native_symbol", f"the library needs {needed} at load time; link only what build.py links")

    slots = {s.addr + 8 * i: (s, i) for s in elf.sections if s.type in ARRAY_TYPES for i in range(s.size // 8)}
    relative, irelative = RELATIVE.get(elf.machine), IRELATIVE.get(elf.machine)
    entries: dict[int, int | str] = {}  # slot -> the function's address, or an imported name
    for offset, info, addend in elf.raw_relocations():
        kind, index = info & 0xFFFFFFFF, info >> 32
        if kind == irelative:
            add("load_time_code", "the library has ifunc relocations: resolver code runs when it loads")
        if offset in slots:
            named = kind != relative and 0 < index < len(dynsyms)
            entries[offset] = dynsyms[index].name if named else addend
    for addr, (s, i) in slots.items():
        if addr not in entries:
            entries[addr] = int.from_bytes(elf.bytes_of(s)[8 * i : 8 * i + 8], "little")
    wanted = {v for v in entries.values() if isinstance(v, int)}
    names: dict[int, tuple[int, str]] = {}  # address -> (binding, name), a local name first
    for name_off, info, _other, shndx, value, _size in elf.raw_symbols():
        kind = info & 0xF
        if shndx == SHN_UNDEF or kind not in (STT_FUNC, STT_GNU_IFUNC):
            continue
        if kind == STT_GNU_IFUNC and (name := elf.symbol_name(".symtab", name_off)) not in toolkit_funcs:
            add("load_time_code", f"{pretty(name)} is an ifunc: its resolver runs when the library loads")
        if value in wanted and (value not in names or info >> 4 == STB_LOCAL):
            names[value] = (info >> 4, elf.symbol_name(".symtab", name_off))
    sti = 0
    for addr in sorted(entries):
        value = entries[addr]
        name = value if isinstance(value, str) else names.get(value, (0, f"the code at {value:#x}"))[1]
        sti += name == STI
        if (
            name in STARTUP_FUNCS
            or name in toolkit_funcs
            or name in accepted_init
            or (name == STI and sti <= n_objects)
        ):
            continue
        add(
            "load_time_code",
            f"{slots[addr][0].name} runs {pretty(name)} when the library loads or unloads; "
            "do all work inside the launchers",
            name,
        )
    return out


def toolkit_baseline(nvcc: str) -> tuple[frozenset[str], frozenset[str]]:
    """(imports, functions) of the static CUDA runtime nvcc links into every library."""
    archive = _cudart_static(nvcc)
    stat = archive.stat()
    return _read_baseline(str(archive), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _read_baseline(archive: str, mtime_ns: int, size: int) -> tuple[frozenset[str], frozenset[str]]:
    imports, funcs = set(), set()
    for _name, data in archive_members(Path(archive)):
        if data[:4] != b"\x7fELF":
            continue
        for sym in Elf(data).symbols():
            if sym.shndx == SHN_UNDEF and sym.name:
                imports.add(sym.name)
            elif sym.type in (STT_FUNC, STT_GNU_IFUNC):
                funcs.add(sym.name)
    return frozenset(imports), frozenset(funcs)


@functools.lru_cache(maxsize=4)
def _cudart_static(nvcc: str) -> Path:
    """libcudart_static.a of the toolkit `nvcc` belongs to: next to it, else where `nvcc -dryrun` links from."""
    root = Path(nvcc).resolve().parent.parent
    for candidate in [*sorted(root.glob("targets/*/lib/libcudart_static.a")), root / "lib64" / "libcudart_static.a"]:
        if candidate.is_file():
            return candidate
    try:
        proc = subprocess.run(
            [nvcc, "-dryrun", "-shared", "-o", "/dev/null", "none.o"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValueError(f"cannot ask {nvcc} where the CUDA runtime is: {exc}") from None
    for d in re.findall(r'"-L([^"]+)"', proc.stdout + proc.stderr):
        if (p := Path(d) / "libcudart_static.a").is_file():
            return p
    raise ValueError(f"libcudart_static.a of {nvcc} not found")
