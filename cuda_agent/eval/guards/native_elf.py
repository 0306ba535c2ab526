"""A small, fast reader of one ELF file (object or shared library) for the native audit.

The tables are unpacked with `struct` straight from the file's bytes. pyelftools reads the same
thing, but through `construct`: about 8 ms to open a file, 0.4 ms per section header and 36 us
per symbol, so 100-200 ms for a kernel library carrying the static CUDA runtime (~4000 symbols)
and a CUB object (~130 sections), where this takes a few ms. pyelftools supplies the constants
(machine and relocation type numbers) and, in the tests, the reference reading this one is
checked against. Only 64-bit little-endian ELF is read (x86-64 and aarch64 Linux).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from elftools.elf.enums import ENUM_E_MACHINE, ENUM_RELOC_TYPE_AARCH64, ENUM_RELOC_TYPE_x64

SHT_SYMTAB, SHT_RELA, SHT_NOBITS, SHT_DYNSYM = 2, 4, 8, 11
SHT_INIT_ARRAY, SHT_FINI_ARRAY, SHT_PREINIT_ARRAY = 14, 15, 16
SHF_WRITE, SHF_ALLOC, SHF_EXEC, SHF_GROUP, SHF_TLS = 0x1, 0x2, 0x4, 0x200, 0x400
STB_LOCAL, STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE = 0, 1, 2, 10
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE, STT_COMMON, STT_TLS, STT_GNU_IFUNC = 0, 1, 2, 3, 4, 5, 6, 10
SHN_UNDEF, SHN_COMMON = 0, 0xFFF2
DT_NEEDED = 1
_MACHINES = {ENUM_E_MACHINE["EM_X86_64"]: "EM_X86_64", ENUM_E_MACHINE["EM_AARCH64"]: "EM_AARCH64"}
# Relocation types: RELATIVE (base + addend: init_array slots of a library), IRELATIVE (an ifunc).
RELATIVE = {
    "EM_X86_64": ENUM_RELOC_TYPE_x64["R_X86_64_RELATIVE"],
    "EM_AARCH64": ENUM_RELOC_TYPE_AARCH64["R_AARCH64_RELATIVE"],
}
IRELATIVE = {
    "EM_X86_64": ENUM_RELOC_TYPE_x64["R_X86_64_IRELATIVE"],
    "EM_AARCH64": ENUM_RELOC_TYPE_AARCH64.get("R_AARCH64_IRELATIVE", 1032),
}
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")


class ElfError(Exception):
    """The file is not an ELF this audit can read."""


@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int


@dataclass(frozen=True)
class Symbol:
    name: str
    bind: int
    type: int
    shndx: int
    value: int
    size: int


@dataclass(frozen=True)
class Reloc:
    offset: int  # in the section it applies to (an address, in a library)
    type: int
    symbol: Symbol | None
    addend: int


class Elf:
    """Sections, symbol tables and relocations of one file, read from its bytes on demand."""

    def __init__(self, data: bytes) -> None:
        if data[:4] != b"\x7fELF":
            raise ElfError("not an ELF file")
        if data[4] != 2 or data[5] != 1:
            raise ElfError("only 64-bit little-endian ELF is audited")
        self.data = data
        (machine,) = struct.unpack_from("<H", data, 0x12)
        self.machine = _MACHINES.get(machine, f"EM_{machine}")
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        if shoff == 0 or shentsize != _SHDR.size or shoff + shnum * shentsize > len(data):
            raise ElfError("no section headers")
        heads = [_SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
        names = heads[shstrndx] if shstrndx < shnum else None
        self.sections = [
            Section(
                i, self._string(names[4], names[5], h[0]) if names else "", h[1], h[2], h[3], h[4], h[5], h[6], h[7]
            )
            for i, h in enumerate(heads)
        ]

    @classmethod
    def read(cls, path: Path) -> Elf:
        return cls(Path(path).read_bytes())

    def _string(self, offset: int, size: int, index: int) -> str:
        start = offset + index
        end = self.data.find(b"\0", start, offset + size)
        return self.data[start : end if end >= 0 else offset + size].decode(errors="replace")

    def bytes_of(self, s: Section) -> bytes:
        return b"" if s.type == SHT_NOBITS else self.data[s.offset : s.offset + s.size]

    def by_name(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def raw_symbols(self, table: str = ".symtab") -> list[tuple[int, int, int, int, int, int]]:
        """(name offset, info, other, shndx, value, size) of each entry: cheap, for big tables."""
        s = self.by_name(table)
        return list(_SYM.iter_unpack(self.bytes_of(s))) if s is not None else []

    def symbol_name(self, table: str, offset: int) -> str:
        strtab = self.sections[self.by_name(table).link]
        return self._string(strtab.offset, strtab.size, offset)

    def symbols(self, table: str = ".symtab") -> list[Symbol]:
        return self._symbols(table)[0]

    def _symbols(self, table: str) -> tuple[list[Symbol], int]:
        cache = self.__dict__.setdefault("_symbol_cache", {})
        if table not in cache:
            s = self.by_name(table)
            syms = []
            if s is not None:
                strtab = self.sections[s.link]
                for name, info, _other, shndx, value, size in _SYM.iter_unpack(self.bytes_of(s)):
                    syms.append(
                        Symbol(
                            self._string(strtab.offset, strtab.size, name), info >> 4, info & 0xF, shndx, value, size
                        )
                    )
            cache[table] = (syms, s.index if s is not None else -1)
        return cache[table]

    @cached_property
    def relocations(self) -> dict[int, list[Reloc]]:
        """Section index -> the relocations that apply to it (SHT_RELA: x86-64 and aarch64 use it)."""
        out: dict[int, list[Reloc]] = {}
        for s in self.sections:
            if s.type != SHT_RELA:
                continue
            table = self.sections[s.link].name if s.link < len(self.sections) else ""
            syms = self.symbols(table) if table else []
            relocs = out.setdefault(s.info, [])
            for offset, info, addend in struct.iter_unpack("<QQq", self.bytes_of(s)):
                i = info >> 32
                relocs.append(Reloc(offset, info & 0xFFFFFFFF, syms[i] if 0 < i < len(syms) else None, addend))
        return out

    def raw_relocations(self) -> list[tuple[int, int, int]]:
        """(offset, info, addend) of every RELA entry: for a library's thousands of dynamic relocations."""
        out = []
        for s in self.sections:
            if s.type == SHT_RELA:
                out += struct.iter_unpack("<QQq", self.bytes_of(s))
        return out

    def function_at(self, shndx: int, offset: int) -> Symbol | None:
        """The function symbol whose body holds `offset` of section `shndx` (a call site, an init entry)."""
        best = None
        for sym in self._functions.get(shndx, ()):
            if sym.value <= offset < sym.value + max(sym.size, 1):
                if best is None or sym.bind == STB_LOCAL or best.name.endswith(".cold"):
                    best = sym
        return best

    @cached_property
    def _functions(self) -> dict[int, list[Symbol]]:
        out: dict[int, list[Symbol]] = {}
        for sym in self.symbols():
            if sym.type in (STT_FUNC, STT_GNU_IFUNC) and sym.shndx != SHN_UNDEF:
                out.setdefault(sym.shndx, []).append(sym)
        return out

    def needed(self) -> list[str]:
        """DT_NEEDED entries of a shared library."""
        dyn = self.by_name(".dynamic")
        if dyn is None:
            return []
        strtab = self.sections[dyn.link]
        return [
            self._string(strtab.offset, strtab.size, val)
            for tag, val in struct.iter_unpack("<qQ", self.bytes_of(dyn))
            if tag == DT_NEEDED
        ]


def archive_members(path: Path) -> list[tuple[str, bytes]]:
    """(name, bytes) of each member of a System V `ar` archive (the toolkit's libcudart_static.a)."""
    data = Path(path).read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise ElfError(f"{path} is not an ar archive")
    members, off = [], 8
    while off + 60 <= len(data):
        header = data[off : off + 60]
        name, size = header[:16].decode(errors="replace").strip(), int(header[48:58])
        off += 60
        members.append((name, data[off : off + size]))
        off += size + (size & 1)
    return members
