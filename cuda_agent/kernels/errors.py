"""Compiler output -> short diagnostics a model can act on.

nvcc output mixes four dialects (EDG front end, gcc host compiler, ptxas, the linker) and
repeats itself (a header error appears once per including file, the host and device passes
both warn). We keep one line per distinct diagnostic, `file:line: severity: message`, plus the
offending source line read from disk, and cut the rest with a note of how much was cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.kernels.toolkit import demangle
from cuda_agent.untrusted_files import SOURCE_CAP, UnreadableFile, read_text

# EDG (nvcc front end): `relu.cu(12): error: identifier "x" is undefined` (+ excerpt lines).
_EDG = re.compile(
    r"^(?P<file>\S.*?)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning)(?: #[\w-]+)?"
    r": (?P<msg>.*)$"
)
# gcc / the assembler: `relu.cu:12:5: error: ...`, `relu.cu:1: Error: no such instruction`.
_GCC = re.compile(
    r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)? (?P<sev>fatal error|error|warning|Error|Warning)"
    r": (?P<msg>.*)$"
)
# CUDA tools: `ptxas error   : ...`, `ptxas /tmp/x.ptx, line 27; error   : ...`, `nvcc fatal : ...`.
_TOOL = re.compile(
    r"^(?P<tool>ptxas|nvlink|nvcc|fatbinary|cicc)(?: (?P<ptx>\S+), line (?P<line>\d+);)?"
    r" (?P<sev>error|fatal|warning)\s*: (?P<msg>.*)$"
)
_LD_IN_FUNCTION = re.compile(r"^(?:\S*/)?ld: .*: in function [`'‘](?P<fn>.+?)['’]:$")
_LD_AT = re.compile(r"^\S.*?:\(\.[^)]*\): (?P<msg>.+)$")  # obj:(.text+0x42): undefined reference ...
_LD = re.compile(r"^(?:\S*/)?ld(?:\.\w+)?: (?:(?P<warn>warning): )?(?P<msg>.+)$")
_NOISE = re.compile(
    r"(errors? detected in the compilation of|Ptx assembly aborted due to errors"
    r"|ld returned \d+ exit status)"
)


@dataclass
class Diagnostic:
    severity: str  # "error" or "warning"
    message: str
    file: str | None = None  # as the tool printed it (relative to cwd) or a source hint
    line: int | None = None
    context: list[str] = field(default_factory=list)  # e.g. template instantiation notes
    tool: str | None = None  # who complained, when there is no file to name ("link")


def parse_diagnostics(text: str, cwd: Path, source: str | None = None) -> list[Diagnostic]:
    """Every diagnostic in `text`; `source` names the file being compiled (for ptxas lines)."""
    found: list[Diagnostic] = []
    last_edg: Diagnostic | None = None
    ld_function: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line:
            continue
        if raw[:1].isspace():
            # EDG continuation: the excerpt and caret (we re-read the source) or context.
            note = line.strip()
            if last_edg is not None and note.startswith(("detected during", "(")):
                last_edg.context.append(note)
            continue
        last_edg = None
        if m := _EDG.match(line):
            sev = "warning" if m["sev"] == "warning" else "error"
            last_edg = Diagnostic(sev, m["msg"].strip(), _path(m["file"], cwd), int(m["line"]))
            found.append(last_edg)
        elif m := _GCC.match(line):
            sev = "warning" if m["sev"].lower() == "warning" else "error"
            found.append(Diagnostic(sev, m["msg"].strip(), _path(m["file"], cwd), int(m["line"])))
        elif m := _TOOL.match(line):
            sev = "warning" if m["sev"] == "warning" else "error"
            msg = f"{m['tool']}: {_demangled(m['msg'].strip())}"
            if m["ptx"]:
                msg += f" (PTX line {m['line']})"
            found.append(Diagnostic(sev, msg, source))
        elif m := _LD_IN_FUNCTION.match(line):
            ld_function = m["fn"]
        elif m := _LD_AT.match(line):
            msg = _quotes(m["msg"])
            if ld_function:
                msg += f" (in {ld_function})"
            found.append(Diagnostic("error", msg, tool="link"))
        elif m := _LD.match(line):
            found.append(Diagnostic("warning" if m["warn"] else "error", _quotes(m["msg"]), tool="link"))
        elif line.startswith("collect2: error"):
            found.append(Diagnostic("error", line.split(": ", 2)[-1], tool="link"))
    # Summary lines only matter when nothing more specific was found.
    specific = [d for d in found if not _NOISE.search(d.message)]
    return specific if specific else found


def format_diagnostics(diags: list[Diagnostic], root: Path, max_chars: int = 4000) -> tuple[str, str]:
    """(errors, warnings) as text, duplicates folded, each bounded by max_chars."""
    root = root.resolve()
    sources: dict[Path, list[str] | str | None] = {}
    out = []
    for severity in ("error", "warning"):
        folded: dict[tuple, tuple[Diagnostic, int]] = {}
        for d in diags:
            if d.severity == severity:
                key = (d.file, d.line, d.message)
                first, count = folded.get(key, (d, 0))
                folded[key] = (first, count + 1)
        blocks = [_block(d, n, severity, root, sources) for d, n in folded.values()]
        out.append(_bounded(blocks, max_chars, severity))
    return out[0], out[1]


def trim_compile_output(
    text: str, root: Path, max_chars: int = 4000, *, cwd: Path | None = None, source: str | None = None
) -> tuple[str, str]:
    """(errors, warnings) from raw compiler output; paths shown relative to root. cwd is where the
    compiler ran (default root); source names the file compiled, so ptxas errors (which cite a temp
    .ptx) point at it."""
    return format_diagnostics(parse_diagnostics(text, cwd or root, source), root, max_chars)


def _path(printed: str, cwd: Path) -> str:
    path = Path(printed)
    return str(path if path.is_absolute() else cwd / path)


def _demangled(msg: str) -> str:
    names = re.findall(r"\b_Z\w+", msg)
    for name, readable in demangle(names).items():
        msg = msg.replace(name, readable)
    return msg


def _quotes(msg: str) -> str:
    return re.sub(r"[`‘](.+?)['’]", r"'\1'", msg)


def _block(d: Diagnostic, count: int, severity: str, root: Path, sources: dict) -> str:
    where, code = "", None
    if d.file:
        path = Path(d.file)
        try:
            shown = path.resolve().relative_to(root)
        except (ValueError, OSError):
            shown = None  # outside the candidate (a toolkit header): show as printed, no excerpt
        where = f"{shown if shown is not None else d.file}:"
        if d.line is not None:
            where += f"{d.line}:"
            if shown is not None:
                code = _source_line(path.resolve(), d.line, sources, root, str(shown))
        where += " "
    elif d.tool:
        where = f"{d.tool}: "
    head = f"{where}{severity}: {d.message}" + (f" (x{count})" if count > 1 else "")
    lines = [head]
    if code:
        lines.append(f"    {code[:200]}")
    lines += [f"    {note[:300]}" for note in d.context[:3]]
    return "\n".join(lines)


def _source_line(path: Path, lineno: int, sources: dict, root: Path, shown: str) -> str | None:
    """The line the diagnostic cites, read as untrusted_files says: a `#line` directive can make
    nvcc cite any name in the candidate, a FIFO or a link among them; such a file's one-line
    finding stands in for the excerpt."""
    if path not in sources:
        try:
            sources[path] = read_text(path, root=root, limit=SOURCE_CAP, shown=shown).splitlines()
        except UnreadableFile as e:
            sources[path] = None if e.missing else str(e)
    lines = sources[path]
    if isinstance(lines, str):
        return lines
    if lines and 0 < lineno <= len(lines):
        return lines[lineno - 1].strip() or None
    return None


def _bounded(blocks: list[str], max_chars: int, severity: str) -> str:
    kept: list[str] = []
    used = 0
    for i, block in enumerate(blocks):
        cost = len(block) + 1
        if kept and used + cost > max_chars - 60:  # leave room for the note
            rest = len(blocks) - i
            kept.append(f"... {rest} more {severity}{'s' if rest > 1 else ''} not shown")
            break
        kept.append(block[:max_chars])
        used += cost
    return "\n".join(kept)
