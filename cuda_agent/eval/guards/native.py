"""Judge the built library, not only its source (docs/harness.md, the trust boundary; docs/guards.md).

A candidate's host code runs inside the judge's process, and its source can hide what it does
from the source guards: an asm label renames an import, a weak declaration binds to whatever the
process has (PyRun_SimpleString), a constructor runs at dlopen. So each object nvcc built from
the candidate's .cu and the linked libkernels-<hash>.so are read (pyelftools + struct):

- `native_symbol`: every undefined symbol of a candidate object, and every dynamic import of the
  library, must be on the allowlist (native_rules.py) or defined by another object of the build;
  nvcc's registration entry points and `atexit` only from nvcc's registration code; the library
  needs no shared library beyond libc/libstdc++ and the vendor libraries it links.
- `load_time_code`: .init_array/.fini_array/.preinit_array/.ctors/.dtors entries other than nvcc's
  `__sti____cudaRegisterAll` (one per object) and <iostream>'s std::ios_base::Init (gcc < 13;
  accepted only when its code touches nothing else); .init/.fini code; ifunc resolvers.
- `forbidden_call`: a system call, software interrupt or counter read in a candidate object's host
  code (native_code.py, from objdump): inline assembly the source guard took for device code.
- `static_state`: writable data (.data, .bss, TLS, common, any writable section) of a candidate
  object beyond nvcc's own (fatbin handle, the statics of its __device_stub_ functions), the
  toolkit headers' inline statics (COMDAT, in cub::/cuda::/thrust::...), `__constant__` shadows and
  vendor configuration that only the vendor writes (a cuBLAS handle, an algorithm cached per shape:
  native_source.py and native_config.py read the declarations and every use).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterable
from pathlib import Path

from cuda_agent.eval.guards.native_code import NoDisassembler, forbidden_instructions
from cuda_agent.eval.guards.native_elf import SHN_UNDEF, STB_LOCAL, Elf, ElfError
from cuda_agent.eval.guards.native_library import audit_shared, toolkit_baseline
from cuda_agent.eval.guards.native_object import ObjectAudit, Unit
from cuda_agent.eval.guards.native_rules import linked_libs
from cuda_agent.eval.guards.static_py import dedupe
from cuda_agent.eval.verdict import Finding
from cuda_agent.kernels.build import SUPPORT_SOURCE, BuildResult

_SUPPORT_DIR = SUPPORT_SOURCE.parent.resolve()


def audit_library(build: BuildResult, *, extra_symbols: Iterable[str] = ()) -> list[Finding]:
    """Findings (severity fail) about the candidate's built objects and library; [] for a failed build.

    extra_symbols: more imports to allow, exact names or fnmatch globs (docs/guards.md)."""
    if not build.ok or build.lib_path is None:
        return []
    extra = tuple(extra_symbols)
    try:
        units, nvcc, link_flags = _plan(build)
        libs = linked_libs(link_flags)
        elves = {u: Elf.read(u.obj) for u in units}
        library = Elf.read(build.lib_path)
        toolkit = toolkit_baseline(nvcc)
        code = {u: forbidden_instructions(u.obj) for u in units if not u.own}
    except (OSError, ValueError, ElfError, NoDisassembler, subprocess.SubprocessError) as exc:
        return [
            Finding(
                guard="native_symbol",
                where=build.lib_path.name,
                message=(f"the built library could not be audited ({exc}); rebuild it from the candidate's sources"),
            )
        ]
    defined = {s.name for e in elves.values() for s in e.symbols() if s.shndx != SHN_UNDEF and s.bind != STB_LOCAL}
    findings = [
        Finding(
            guard="forbidden_call",
            where=unit.shown,
            message=(
                f"{function} executes `{instruction}` in host code: a system call or counter read that no "
                "import shows; inline assembly belongs in __device__/__global__ functions, and host code "
                "calls the CUDA runtime and libc by name"
            ),
        )
        for unit, found in code.items()
        for function, instruction in found
    ]
    accepted_init: set[str] = set()
    named: set[tuple[str, str]] = set()
    for unit, elf in elves.items():
        if not unit.own:
            audit = ObjectAudit(unit, elf, libs, extra, defined, toolkit[0])
            findings += audit.run()
            accepted_init |= audit.accepted_init
            named |= audit.named
    shared = audit_shared(library, toolkit, libs, extra, accepted_init, len(units))
    findings += [
        Finding(guard=guard, message=message, where=build.lib_path.name)
        for guard, symbol, message in shared
        if (guard, symbol) not in named
    ]
    return dedupe(findings, key=lambda f: (f.guard, f.message))


def _plan(build: BuildResult) -> tuple[list[Unit], str, list[str]]:
    """The objects, nvcc and the link flags, read back from the commands build.py ran."""
    units, link = [], None
    for command in build.commands:
        argv = shlex.split(command) if "'" in command or '"' in command else command.split()
        if argv[:1] == ["cd"] and "-c" in argv and "-o" in argv:
            cwd = Path(argv[1])
            source = cwd / argv[argv.index("-c") + 1]
            inside = source.is_relative_to(cwd.parent)
            shown = source.relative_to(cwd.parent).as_posix() if inside else source.name
            reads = tuple(cwd.parent / name for name in build.reads.get(shown, []))  # what nvcc read for it
            units.append(
                Unit(
                    shown,
                    source,
                    Path(argv[argv.index("-o") + 1]),
                    source.name == SUPPORT_SOURCE.name and cwd.resolve() == _SUPPORT_DIR,
                    reads,
                )
            )
        elif "-shared" in argv:
            link = argv
    if link is None or not units:
        raise ValueError("no compile or link command in the build result")
    return units, link[0], [f for f in link if re.fullmatch(r"-[lL].+", f) and f != "-lineinfo"]
