"""Reading the names g++ and nvcc give things (Itanium C++ ABI mangling), as far as the audit needs.

No general demangler: the audit recognises a few shapes (a function-local static `_ZZ6launchE8last_ptr`,
a namespace-scope one `_ZL4flag` or `_ZN2nsL4flagE`, nvcc's `__device_stub_` statics) and shows them
readably in findings (`launch::last_ptr`).
"""

from __future__ import annotations

import re


def unexplained_gap(size: int, spans: list[tuple[int, int]]) -> int:
    """Bytes of a writable section that no symbol covers, alignment padding aside."""
    pos, gap = 0, 0
    for start, end in sorted(spans) + [(size, size)]:
        if start > pos:
            align = min(start & -start if start else 64, 64)
            if start == size and start - pos >= 8 or start < size and start - pos >= align:
                gap += start - pos
        pos = max(pos, end)
    return gap


def no_linkage(symbol: str) -> str:
    """Without the internal-linkage marker: a static kernel is `_ZN3cub...L11EmptyKernel...`, its stub names
    it `_ZN3cub...11EmptyKernel...`."""
    return re.sub(r"L(?=\d)", "", symbol)


def names_variable(symbol: str, name: str) -> bool:
    """Whether `symbol` is the namespace-scope variable `name` (`name`, `_ZL4name`, `_ZN2nsL4nameE`)."""
    tail = f"{len(name)}{name}"
    return symbol in (name, f"_ZL{tail}") or (symbol.startswith("_ZN") and symbol.endswith(tail + "E"))


def names_handle(symbol: str, function: str | None, name: str) -> bool:
    if function is None:
        return names_variable(symbol, name)
    return (
        symbol.startswith(("_ZZ", "_ZGVZ"))
        and symbol.endswith(f"E{len(name)}{name}")
        and f"{len(function)}{function}" in symbol
    )


def namespace_root(symbol: str) -> str | None:
    """cub for `_ZZN3cub...`, `_ZGVZN3cub...`, `_ZN3cub...`; std for `_ZNSt...`/`_ZSt...`; else None."""
    m = re.match(r"_Z(?:GV)?Z?(N[rVKO]*)?(St|\d+)", symbol)
    if m is None or (m.group(1) is None and m.group(2) != "St"):
        return None
    if m.group(2) == "St":
        return "std"
    n = int(m.group(2))
    return symbol[m.end() : m.end() + n]


def pretty(symbol: str) -> str:
    """A readable name for the few shapes findings show: `launch::last_ptr`, `ns::flag`, `f`."""
    m = re.fullmatch(r"_Z(GV)?ZL?(\d+)(\w+)", symbol)
    if m:
        n = int(m.group(2))
        function, rest = m.group(3)[:n], m.group(3)[n:]
        local = re.search(r"E(\d+)([A-Za-z_]\w*?)(?:_\d+)?$", rest)
        if local and int(local.group(1)) == len(local.group(2)):
            prefix = "guard of " if m.group(1) else ""
            return f"{prefix}{function}::{local.group(2)}"
    if m := re.match(r"_Z(\d+)", symbol):  # a plain function: _Z11first_touchv
        return symbol[m.end() : m.end() + int(m.group(1))]
    names, rest = [], symbol[3:] if symbol.startswith(("_ZN", "_ZL")) else ""
    while (m := re.match(r"L?(\d+)", rest)) and len(rest) >= m.end() + int(m.group(1)):
        names.append(rest[m.end() : m.end() + int(m.group(1))])
        rest = rest[m.end() + int(m.group(1)) :]
    return "::".join(names) if names else symbol
