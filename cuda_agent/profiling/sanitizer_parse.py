"""compute-sanitizer's text report -> SanitizerReport.

Every line of the tool starts with `=========`. A report starts with an unindented message
("Invalid __global__ write of size 4 bytes", "Error: Race reported between ...", "Uninitialized
__shared__ memory read ...", "Program hit cudaErrorLaunchFailure ..."), goes on with indented
lines ("at kernel(...)+0x1c0 in file.cu:8", "by thread (0,0,0) in block (16384,0,0)", "Access to
0x... is out of bounds", "and is 1 bytes after the nearest allocation ...", frames) and ends at a
bare `=========`. The run ends with "ERROR SUMMARY: N errors" (racecheck: "RACECHECK SUMMARY: N
hazards displayed (E errors, W warnings)"). The program's own output is interleaved, unprefixed.
"""

from __future__ import annotations

import os
import re

from pydantic import BaseModel

from cuda_agent.profiling.runner import short_name

MAX_FINDINGS = 12  # distinct findings kept; the rest are only counted
# lines that continue a report even where the indentation was lost (docs, copied logs)
_CONTINUATION = (
    "at ",
    "by thread",
    "Address ",
    "Access to",
    "Access at",
    "and ",
    "Saved host",
    "Host Frame",
    "Device Frame",
    "[",
    "in ",
    "Write Thread",
    "Read Thread",
    "Current Value",
)
_SKIP = ("COMPUTE-SANITIZER", "CUDA-MEMCHECK", "LEAK SUMMARY", "Process ID", "Target application returned an error")


class Finding(BaseModel):
    kind: str  # what went wrong, e.g. "invalid __global__ write of 4 bytes"
    kernel: str | None = None
    location: str | None = None  # file.cu:line, when built with -lineinfo
    thread: str | None = None  # of the first report folded into this finding
    block: str | None = None
    address: str | None = None  # address and what is wrong with it
    count: int = 1  # reports with the same kind, kernel and location
    hazards: int | None = None  # racecheck: byte-level hazards behind this race

    def line(self) -> str:
        where = " ".join(
            x
            for x in (
                f"in {self.kernel}" if self.kernel else "",
                f"at {self.location}" if self.location and self.location not in self.kind else "",
            )
            if x
        )
        who = f"thread {self.thread} block {self.block}" if self.thread else ""
        more = [
            x
            for x in (
                who,
                self.address,
                f"{self.hazards:,} hazards" if self.hazards else "",
                f"x{self.count} reports" if self.count > 1 else "",
            )
            if x
        ]
        return f"{self.kind} {where}".strip() + (f" ({'; '.join(more)})" if more else "")


class SanitizerReport(BaseModel):
    tool: str = "memcheck"
    errors: int | None = None  # from the summary; None when the run never reached it
    hazards: int | None = None  # racecheck
    warnings: int | None = None  # racecheck
    not_printed: int = 0  # over --print-limit
    findings: list[Finding] = []
    app_failed: bool = False  # the program itself exited with an error (often because of a finding)
    notes: list[str] = []  # the tool's own complaints (it could not instrument, ...)

    @property
    def complete(self) -> bool:
        return self.errors is not None or self.hazards is not None

    @property
    def clean(self) -> bool:
        return self.complete and not self.findings and not self.errors and not self.hazards


def _int(text: str) -> int:
    return int(re.sub(r"[,.\s]", "", text))


def parse_sanitizer(text: str, tool: str = "memcheck") -> SanitizerReport:
    report = SanitizerReport(tool=tool)
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for raw in text.splitlines():
        if not raw.startswith("========="):
            continue  # the program's own output
        body = raw[9:].rstrip()
        stripped = body.strip()
        if not stripped:
            current = None
        elif current is not None and (body.startswith("  ") or stripped.startswith(_CONTINUATION)):
            current.append(stripped)
        elif not _summary(stripped, report):
            current = [stripped]
            blocks.append(current)
    found: dict[tuple, Finding] = {}
    for block in blocks:
        finding = _finding(block)
        key = (finding.kind, finding.kernel, finding.location)
        if key in found:
            found[key].count += 1
        elif len(found) < MAX_FINDINGS:
            found[key] = finding
    report.findings = list(found.values())
    return report


def _summary(line: str, report: SanitizerReport) -> bool:
    """Take in a summary or bookkeeping line; True when the line is one."""
    if m := re.match(r"ERROR SUMMARY:\s*([\d,.]+) errors? were not printed", line):
        report.not_printed = _int(m.group(1))
    elif m := re.match(r"ERROR SUMMARY:\s*([\d,.]+) errors?\s*$", line):
        report.errors = _int(m.group(1))
    elif m := re.match(
        r"RACECHECK SUMMARY:\s*([\d,.]+) hazards? displayed\s*\(([\d,.]+) errors?,\s*([\d,.]+) warn", line
    ):
        report.hazards, report.errors, report.warnings = (_int(g) for g in m.groups())
    elif line.startswith("Target application returned an error") or "didn't terminate successfully" in line:
        report.app_failed = True
    elif line.startswith(_SKIP):
        pass
    elif re.match(r"(Error|Internal Sanitizer Error|Warning):", line) and not re.search(
        r"Race reported|hazard detected", line
    ):  # e.g. "Warning: Maximum number of hazards reached"
        report.notes.append(line[:200])
    else:
        return False
    return True


def _finding(block: list[str]) -> Finding:
    head, rest = block[0], block[1:]
    if m := re.search(
        r"Race reported between (\w+) access at (.+?) and (\w+) access at (.+?)"
        r"(?:\s*\[([\d,.]+) hazards?\])?$",
        " ".join(block),
    ):
        (k1, l1), (_, l2) = _where(m.group(2)), _where(m.group(4))
        return Finding(
            kind=f"shared-memory race: {m.group(1)} at {l1 or '?'} vs {m.group(3)} at {l2 or '?'}",
            kernel=k1,
            location=l1,
            hazards=_int(m.group(5)) if m.group(5) else None,
        )
    if m := re.match(r"Invalid (__\w+__) (\w+) of size ([\d,.]+)", head):
        kind = f"invalid {m.group(1)} {m.group(2)} of {_int(m.group(3))} bytes"
    elif m := re.match(r"Uninitialized (__\w+__) memory (\w+) of size ([\d,.]+)", head):
        kind = f"uninitialized {m.group(1)} {m.group(2)} of {_int(m.group(3))} bytes"
    elif m := re.match(r"Program hit (\w+) \(error \d+\) due to \"(.+?)\" on CUDA API call to (\w+)", head):
        kind = f"CUDA API error {m.group(1)} ({m.group(2)}) on {m.group(3)}"
    elif m := re.search(r"Potential (\w+) hazard detected at (__\w+__) (0x[0-9a-fA-F]+) in block \(([\d, ]+)\)", head):
        kind = f"shared-memory {m.group(1)} hazard"
    else:
        kind = head[:160]
    f = Finding(kind=kind)
    for line in rest:
        if line.startswith("at ") and f.kernel is None and f.location is None:
            f.kernel, f.location = _where(line[3:])
        elif m := re.match(r"by thread \(([\d, ]+)\) in block \(([\d, ]+)\)", line):
            f.thread, f.block = f"({m.group(1).replace(' ', '')})", f"({m.group(2).replace(' ', '')})"
        elif m := re.match(r"(?:Address|Access to|Access at) (0x[0-9a-fA-F]+)(?:\s+(?:is )?(.*))?$", line):
            f.address = " ".join(x for x in (m.group(1), m.group(2)) if x)
        elif line.startswith("and is ") and f.address:
            f.address += ", " + line[len("and is ") :]
        elif line.startswith("Device Frame:") and f.location is None:
            f.location = _where(line[len("Device Frame:") :].strip())[1]
        elif m := re.match(r"(Write|Read) Thread \(([\d, ]+)\) at (.+)$", line):
            k, loc = _where(m.group(3))
            f.kernel, f.kind = f.kernel or k, f"{f.kind} ({m.group(1)} at {loc or '?'})" if loc else f.kind
    return f


def _where(text: str) -> tuple[str | None, str | None]:
    """'k(float *)+0x1c0 in /a/relu.cu:8' -> ('k', 'relu.cu:8'); also 'k():0x160 in f.cu:6',
    '0x30 in /a/f.cu:6:k(void)' and '0x148 in k(int*, int)'."""
    text, kernel, loc = text.strip(), None, None
    if m := re.search(r"\s+in\s+(\S+?:\d+)(?::(.+))?$", text):
        loc, kernel = os.path.basename(m.group(1)), m.group(2) or text[: m.start()]
    elif m := re.match(r"0x[0-9a-fA-F]+\s+in\s+(.+)$", text):
        kernel = m.group(1)
    else:
        kernel = text
    kernel = re.sub(r"(\+|:)0x[0-9a-fA-F]+$", "", kernel.strip())
    if re.fullmatch(r"0x[0-9a-fA-F]+", kernel):
        kernel = ""
    return (short_name(kernel) or None), loc
