"""The native audit of one object nvcc built from a candidate's .cu (native.py has the overview).

Imports against the allowlist, load-time entries, writable data: each finding names the symbol
and cites the source file the object came from.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.eval.guards.native_config import GETTER
from cuda_agent.eval.guards.native_elf import (
    SHF_ALLOC,
    SHF_EXEC,
    SHF_GROUP,
    SHF_WRITE,
    SHN_COMMON,
    SHN_UNDEF,
    STB_GNU_UNIQUE,
    STB_LOCAL,
    STB_WEAK,
    STT_FILE,
    STT_FUNC,
    STT_GNU_IFUNC,
    STT_SECTION,
    STT_TLS,
    Elf,
    Section,
    Symbol,
)
from cuda_agent.eval.guards.native_names import (
    names_handle,
    names_variable,
    namespace_root,
    no_linkage,
    pretty,
    unexplained_gap,
)
from cuda_agent.eval.guards.native_rules import (
    ARRAY_SECTIONS,
    ARRAY_TYPES,
    EXIT_HOOKS,
    IOS_INIT_REFS,
    NVCC_DATA,
    NVCC_REGISTRATION_FUNCS,
    REGISTRATION_ONLY,
    STARTUP_FILES,
    STI,
    STUB_LOCALS,
    TOOLKIT_NAMESPACES,
    import_problem,
)
from cuda_agent.eval.guards.native_source import SourceHints, source_hints
from cuda_agent.eval.verdict import Finding
from cuda_agent.kernels.objects import local_headers

# the only std:: code a candidate writes (static_cu.py): hash/less/equal_to specialized for its own key; a
# static inside one of their members (or a lambda there) is its data in std::'s name, not the toolkit's
_OWN_STD = re.compile(r"_Z(?:GV)?Z+NK?St(?:4hash|4less|8equal_to)I")


@dataclass(frozen=True)
class Unit:
    """One object of the library: where its source is, as findings cite it, and whether it is ours."""

    shown: str  # kernels/x.cu
    source: Path
    obj: Path
    own: bool  # support.cu: the project's, not audited
    reads: tuple[Path, ...] = ()  # every file its compile read outside the toolkit (BuildResult.reads)


class ObjectAudit:
    """The checks of one candidate object; `named` and `accepted_init` tell the library's audit what
    was already reported here and which initialisers were accepted."""

    def __init__(
        self,
        unit: Unit,
        elf: Elf,
        libs: set[str],
        extra: tuple[str, ...],
        defined: set[str],
        runtime_imports: frozenset[str] = frozenset(),
    ) -> None:
        self.unit, self.elf, self.libs, self.extra, self.defined = unit, elf, libs, extra, defined
        self.runtime_imports = runtime_imports  # what the static CUDA runtime linked beside it calls
        self.symbols = elf.symbols()
        self.findings: list[Finding] = []
        self.accepted_init: set[str] = set()
        self.named: set[tuple[str, str]] = set()  # (guard, symbol) found here: the library need not repeat it

    def add(self, guard: str, message: str) -> None:
        self.findings.append(Finding(guard=guard, message=message, where=self.unit.shown))

    def run(self) -> list[Finding]:
        self.load_time()
        self.imports()
        self.definitions()
        self.statics()
        return self.findings

    def definitions(self) -> None:
        """Functions the start files or the CUDA runtime call by name, defined here in their place:
        `__gmon_start__` is called by _init at load, `_ITM_registerTMCloneTable` by frame_dummy."""
        for sym in self.symbols:
            if sym.shndx == SHN_UNDEF or sym.bind == STB_LOCAL or not sym.name:
                continue
            if sym.name in STARTUP_FILES:
                self.add(
                    "load_time_code",
                    f"{sym.name} is defined here, and the library's start-up code calls "
                    "it when the library loads; do not define it",
                )
            elif sym.name in self.runtime_imports:
                self.add(
                    "native_symbol",
                    f"{sym.name} is defined here, in place of the one the CUDA runtime "
                    "linked into the library calls; name your functions so they collide with nothing",
                )

    # -- native_symbol -------------------------------------------------------------------------

    @functools.cached_property
    def sites(self) -> dict[str, list[str]]:
        """Imported name -> the functions that reference it (`<data in .x>` outside any function)."""
        out: dict[str, list[str]] = {}
        for shndx, relocs in self.elf.relocations.items():
            for r in relocs:
                if r.symbol is not None and r.symbol.shndx == SHN_UNDEF and r.symbol.name:
                    fn = self.elf.function_at(shndx, r.offset)
                    out.setdefault(r.symbol.name, []).append(
                        fn.name if fn else f"<data in {self.elf.sections[shndx].name}>"
                    )
        return out

    def imports(self) -> None:
        for sym in self.symbols:
            name = sym.name
            if sym.shndx != SHN_UNDEF or not name or sym.type in (STT_SECTION, STT_FILE) or name in self.defined:
                continue
            weak = "a weak reference to " if sym.bind == STB_WEAK else ""
            sites = self.sites.get(name, [])
            if name in EXIT_HOOKS:
                bad = sorted({s for s in sites if s not in self.accepted_init and not self.container_dtor(s)})
                if bad:
                    self.named.add(("native_symbol", name))
                    self.add(
                        "native_symbol",
                        f"{name} registers code to run at exit (from {pretty(bad[0])}); "
                        "launchers must not leave anything behind them (a static std::map of cached "
                        "algorithms is fine as a function-local static)",
                    )
            elif why := import_problem(name, self.libs, self.extra):
                self.named.add(("native_symbol", name))
                self.add(
                    "native_symbol",
                    f"the object imports {weak}{name}: {why}; a launcher may call the "
                    "CUDA runtime, cuBLAS/cuDNN (linked when included), libm and basic libc only",
                )
            elif name in REGISTRATION_ONLY:
                bad = sorted({s for s in sites if s not in NVCC_REGISTRATION_FUNCS})
                if bad and name == "atexit":
                    self.add(
                        "native_symbol",
                        f"atexit is called from {pretty(bad[0])}: code registered to run at "
                        "exit escapes the harness; launchers must not leave anything behind them",
                    )
                elif bad:
                    self.add(
                        "native_symbol",
                        f"{name} is called from {pretty(bad[0])}, not from nvcc's "
                        "registration code: no registering or loading code at run time",
                    )

    def container_dtor(self, site: str) -> bool:
        """g++ registers a function-local static's destructor with __cxa_atexit when the function first runs:
        accepted in a function (or the launcher it was inlined into) that refers to a std::map/unordered_map
        of vendor configuration the audit allows, when the sources never name an exit hook themselves."""
        hints = self.hints
        if hints.exit_calls or not hints.containers:
            return False
        base = site.removesuffix(".cold")
        for fn in self.symbols:
            if fn.type != STT_FUNC or fn.shndx == SHN_UNDEF or fn.name not in (base, base + ".cold"):
                continue
            for r in self.elf.relocations.get(fn.shndx, []):
                if not fn.value <= r.offset < fn.value + fn.size or r.symbol is None:
                    continue
                target = self.data_at(r.symbol.shndx, r.addend) if r.symbol.type == STT_SECTION else r.symbol
                if target is not None and any(names_handle(target.name, f, v) for f, v in hints.containers):
                    return True
        return False

    def data_at(self, shndx: int, addend: int) -> Symbol | None:
        """The data symbol a section-relative relocation points at (PC-relative ones are 4 bytes short)."""
        return next(
            (
                s
                for s in self.symbols
                if s.shndx == shndx
                and s.type not in (STT_SECTION, STT_FUNC, STT_FILE)
                and any(s.value <= a < s.value + max(s.size, 1) for a in (addend, addend + 4))
            ),
            None,
        )

    # -- load_time_code ------------------------------------------------------------------------

    def load_time(self) -> None:
        for s in self.elf.sections:
            if s.type in ARRAY_TYPES or s.name.startswith(ARRAY_SECTIONS):
                self.array(s)
            elif s.name in (".init", ".fini") or (s.name.startswith((".init.", ".fini.")) and s.flags & SHF_EXEC):
                self.add(
                    "load_time_code",
                    f"code in section {s.name} runs when the library loads or unloads; "
                    "do all work inside the launchers",
                )
        for sym in self.symbols:
            if sym.type == STT_GNU_IFUNC and sym.shndx != SHN_UNDEF:
                self.add(
                    "load_time_code",
                    f"{pretty(sym.name)} is an ifunc: its resolver runs when the library loads; define plain functions",
                )

    def array(self, s: Section) -> None:
        relocs = self.elf.relocations.get(s.index, [])
        if len(relocs) < s.size // 8:
            self.add(
                "load_time_code",
                f"{s.name} holds {s.size // 8 - len(relocs)} entries with no symbol; "
                "nothing may run when the library loads",
            )
        seen_sti = 0
        for r in relocs:
            fn = self.target(r.symbol, r.addend)
            name = fn.name if fn else (r.symbol.name if r.symbol and r.symbol.name else "an unnamed address")
            if s.name == ".init_array" and name == STI and seen_sti == 0:
                seen_sti += 1
                continue
            if (
                s.name == ".init_array"
                and fn is not None
                and name.startswith("_GLOBAL__sub_I_")
                and self.ios_init_only(fn)
            ):
                self.accepted_init.add(name)
                continue
            self.named.add(("load_time_code", name))
            # _GLOBAL__sub_I_*: g++'s initialiser of the file's global objects
            what = "the constructor of a C++ global object" if name.startswith("_GLOBAL__sub_I") else pretty(name)
            if calls := self.calls_in(fn) if fn is not None else []:
                what += f" (calling {', '.join(calls)})"
            self.add(
                "load_time_code",
                f"{s.name} runs {what} when the library loads or unloads (constructor, "
                "global object or section placement); do all work inside the launchers: a handle or a "
                "std::map made at first use is a function-local static (`static std::map<...> cache;` or "
                "`static cublasHandle_t h = nullptr; if (!h) cublasCreate(&h);` inside the function)",
            )

    def calls_in(self, fn: Symbol) -> list[str]:
        """Up to three functions that `fn` references, by readable name."""
        out: list[str] = []
        for r in self.elf.relocations.get(fn.shndx, []):
            if fn.value <= r.offset < fn.value + fn.size and r.symbol is not None:
                target = self.target(r.symbol, r.addend + 4 if r.symbol.type == STT_SECTION else r.addend)
                if (
                    target is not None
                    and target.name not in IOS_INIT_REFS | {"stderr", "stdout"}
                    and pretty(target.name) not in out
                ):
                    out.append(pretty(target.name))
        return out[:3]

    def target(self, sym: Symbol | None, addend: int) -> Symbol | None:
        if sym is None:
            return None
        if sym.type == STT_SECTION:
            return self.elf.function_at(sym.shndx, addend)
        return sym if sym.type in (STT_FUNC, STT_GNU_IFUNC) or sym.shndx == SHN_UNDEF else None

    def ios_init_only(self, fn: Symbol) -> bool:
        """<iostream>'s initialiser (gcc < 13): it only constructs std::__ioinit and registers its dtor."""
        ioinit = next((s for s in self.symbols if s.name == "_ZStL8__ioinit"), None)
        for r in self.elf.relocations.get(fn.shndx, []):
            if not fn.value <= r.offset < fn.value + fn.size or r.symbol is None:
                continue
            if r.symbol.type == STT_SECTION:
                if (
                    ioinit is None
                    or r.symbol.shndx != ioinit.shndx
                    or not any(ioinit.value <= a < ioinit.value + max(ioinit.size, 1) for a in (r.addend, r.addend + 4))
                ):
                    return False
            elif r.symbol.name not in IOS_INIT_REFS:
                return False
        return True

    # -- static_state --------------------------------------------------------------------------

    @functools.cached_property
    def functions(self) -> set[str]:
        return {no_linkage(s.name) for s in self.symbols if s.type == STT_FUNC and s.shndx != SHN_UNDEF}

    @functools.cached_property
    def hints(self) -> SourceHints:
        if self.unit.reads:
            return source_hints(self.unit.reads, self.defined)
        try:
            headers, _ = local_headers(self.unit.source, self.unit.source.parent)
        except OSError:
            headers = []
        return source_hints([self.unit.source, *headers], self.defined)

    def statics(self) -> None:
        sections = self.elf.sections
        writable = {
            s.index
            for s in sections
            if s.flags & SHF_ALLOC
            and s.flags & SHF_WRITE
            and s.type not in ARRAY_TYPES
            and not s.name.startswith((*ARRAY_SECTIONS, ".data.rel.ro"))
        }
        covered: dict[int, list[tuple[int, int]]] = {}
        for sym in self.symbols:
            if sym.type in (STT_SECTION, STT_FILE, STT_FUNC) or not (sym.shndx in writable or sym.shndx == SHN_COMMON):
                continue
            covered.setdefault(sym.shndx, []).append((sym.value, sym.value + sym.size))
            if not self.allowed_static(sym, sections[sym.shndx] if sym.shndx in writable else None):
                self.add("static_state", self.static_message(sym))
        for index in writable:
            s = sections[index]
            if gap := unexplained_gap(s.size, covered.get(index, [])):
                self.add(
                    "static_state",
                    f"{gap} bytes of writable data in {s.name} have no symbol (data "
                    "defined in assembly?); keep no state between calls",
                )

    def allowed_static(self, sym: Symbol, section: Section | None) -> bool:
        name = sym.name
        if name in NVCC_DATA:
            return sym.size <= NVCC_DATA[name]
        if name.startswith("DW.ref.") and sym.size <= 8:  # g++'s pointer to a typeinfo a catch clause names
            return True
        if (m := re.fullmatch(r"_Z(GV)?Z(L?)(\d+)(\w+)", name)) and m.group(4)[: int(m.group(3))].startswith(
            "__device_stub__"
        ):  # L: the stub of a template kernel has internal linkage
            stub, rest = m.group(4)[: int(m.group(3))], m.group(4)[int(m.group(3)) :]
            local = next((k for k in STUB_LOCALS if rest.endswith("E" + k)), None)
            size = 8 if m.group(1) else STUB_LOCALS.get(local, -1)
            # the stub itself, or (a template's stub is inlined) the kernel it launches: _Z9dwconv3x3...
            fn, kernel = f"_Z{m.group(2)}{len(stub)}{stub}", stub[len("__device_stub_") :]
            return (
                local is not None
                and sym.size <= size
                and (no_linkage(kernel) in self.functions or any(f.startswith(no_linkage(fn)) for f in self.functions))
            )
        if (
            section is not None
            and section.flags & SHF_GROUP
            and sym.bind in (STB_WEAK, STB_GNU_UNIQUE)
            and namespace_root(name) in TOOLKIT_NAMESPACES
            and not _OWN_STD.match(name)
        ):
            return True
        hints = self.hints
        if any(names_variable(name, c) for c in hints.constant - hints.device):
            return True
        # a handle is 8 bytes, a cached algorithm 64, a heuristic result 96, a std::unordered_map 56
        return any(names_handle(name, fn, var) for fn, var in hints.handles) and sym.size <= 128

    def static_message(self, sym: Symbol) -> str:
        name = pretty(sym.name)
        tls = "thread-local " if sym.type == STT_TLS else ""
        if any(names_variable(sym.name, d) for d in self.hints.device):
            return (
                f"{name} is a __device__/__managed__ variable: device state that outlives a call; "
                "pass buffers from forward (torch.empty) and keep nothing between calls"
            )
        misused = next((why for (fn, var), why in self.hints.misused.items() if names_handle(sym.name, fn, var)), None)
        if misused is not None:
            return (
                f"{name} is state: {misused}; keep a vendor handle, descriptor or chosen algorithm only "
                f"as the vendor made it, e.g. `{GETTER}` (copy or pass it by value, never cast it)"
            )
        if sym.name.startswith(("_ZZ", "_ZGVZ")):
            return (
                f"{name} is a {tls}static local variable: it keeps state between calls (a cache of "
                "pointers or results); compute everything on every call (query device attributes on "
                "each call; one-time setup such as cudaFuncSetAttribute: `static std::once_flag once; "
                "std::call_once(once, [] { ... });`; a constant list: `static constexpr int k[] = {...}`; "
                f"only vendor handles and chosen algorithms may stay in a static: `{GETTER}`)"
            )
        return (
            f"{name} is {tls}writable static data: it keeps state between calls; use locals and "
            "buffers passed in, or `__constant__`/`static const` tables (a vendor handle may stay in a "
            f"static: `{GETTER}`)"
        )
