"""ncu's `--csv --page details` output -> one KernelProfile per kernel launch.

Each CSV row is one metric (or one rule result) of one launch: "ID", "Kernel Name", "Block Size",
"Grid Size", "Section Name", "Metric Name", "Metric Unit", "Metric Value", then "Rule Name",
"Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup". Lines that are not
CSV (==PROF== progress, the program's own prints) come before and between. Metrics are looked up
by (section, display name) with the raw metric name as a second choice; anything missing is None.
"""

from __future__ import annotations

import csv
import re

from pydantic import BaseModel

SOL, OCC, LAUNCH = "GPU Speed Of Light Throughput", "Occupancy", "Launch Statistics"
MEM, WARPS = "Memory Workload Analysis", "Warp State Statistics"

_TIME_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
_BYTES = {
    "byte": 1.0,
    "kbyte": 1e3,
    "mbyte": 1e6,
    "gbyte": 1e9,
    "tbyte": 1e12,
    "kib": 2.0**10,
    "mib": 2.0**20,
    "gib": 2.0**30,
}
_LIMITERS = {
    "Registers": "registers",
    "Shared Mem": "shared memory",
    "Warps": "warps per SM (block size)",
    "SM": "blocks per SM (blocks too small)",
    "Barriers": "barriers",
}
_RULE_KEEP = 320  # characters of one rule message


class KernelProfile(BaseModel):
    id: int
    name: str
    duration_us: float | None = None
    sm_pct: float | None = None  # Compute (SM) Throughput, % of peak
    mem_pct: float | None = None  # Memory Throughput, % of peak
    dram_pct: float | None = None
    achieved_occupancy: float | None = None  # %
    theoretical_occupancy: float | None = None  # %
    occupancy_limiter: str | None = None
    registers: int | None = None  # per thread
    shared_bytes: int | None = None  # static + dynamic, per block
    grid: str | None = None
    block: str | None = None
    dram_bytes: float | None = None  # read + written
    stalls: list[tuple[str, float]] = []  # top 3: (reason, cycles per issued instruction)
    rules: list[str] = []  # ncu's own advice, deduplicated and shortened, most promising first


def number(text: str | None) -> float | None:
    """'1,215,000,000.50' -> 1215000000.5; '', 'n/a' -> None."""
    try:
        return float(text.strip().replace(",", "")) if text is not None else None
    except ValueError:
        return None


def _scaled(value: float | None, unit: str, table: dict[str, float]) -> float | None:
    u = unit.strip().lower().split("/")[0]  # byte/block -> byte; Gbyte/s is handled by the caller
    return value * table[u] if value is not None and u in table else None


def csv_rows(text: str) -> list[dict[str, str]]:
    """The CSV part of ncu's output: from the "ID" header on, lines that start with a quote."""
    lines = text.lstrip("\ufeff").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return []
    body = [lines[start]] + [line for line in lines[start + 1 :] if line.startswith('"')]
    return list(csv.DictReader(body))


def parse_ncu_csv(text: str) -> list[KernelProfile]:
    launches: dict[str, list[dict[str, str]]] = {}
    for row in csv_rows(text):
        rid = (row.get("ID") or "").strip()
        if rid.isdigit():  # the raw page's units row has no ID
            launches.setdefault(rid, []).append(row)
    return [_profile(int(rid), rows) for rid, rows in launches.items()]


def _profile(rid: int, rows: list[dict[str, str]]) -> KernelProfile:
    metrics: dict[tuple[str, str], tuple[str, str]] = {}
    rules: list[tuple[int, float, str]] = []
    for row in rows:
        if (row.get("Rule Description") or "").strip():
            if not _NOISE.search(row["Rule Description"]):
                rules.append(_rule(row))
        elif row.get("Metric Name"):
            metrics.setdefault(
                (row.get("Section Name") or "", row["Metric Name"].strip()),
                ((row.get("Metric Unit") or "").strip(), row.get("Metric Value") or ""),
            )

    def get(section: str, *names: str) -> tuple[str, float | None]:
        for name in names:
            found = metrics.get((section, name))
            if found is None and "__" in name:  # a raw metric name (unit__counter...) may sit in any section
                found = next((uv for (_, n), uv in metrics.items() if n == name), None)
            if found is not None:
                return found[0], number(found[1])
        return "", None

    first = rows[0]
    unit, dur = get(SOL, "Duration", "gpu__time_duration.sum")
    duration = _scaled(dur, unit, _TIME_US)
    k = KernelProfile(id=rid, name=(first.get("Kernel Name") or "?").strip(), duration_us=duration)
    k.sm_pct = get(SOL, "Compute (SM) Throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed")[1]
    k.mem_pct = get(SOL, "Memory Throughput", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")[1]
    k.dram_pct = get(SOL, "DRAM Throughput", "dram__throughput.avg.pct_of_peak_sustained_elapsed")[1]
    k.achieved_occupancy = get(OCC, "Achieved Occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active")[1]
    k.theoretical_occupancy = get(OCC, "Theoretical Occupancy", "sm__maximum_warps_per_active_cycle_pct")[1]
    k.occupancy_limiter = _limiter(
        {
            name[len("Block Limit ") :]: get(OCC, name)[1]
            for s, name in metrics
            if s == OCC and name.startswith("Block Limit ")
        },
        k.theoretical_occupancy,
    )
    regs = get(LAUNCH, "Registers Per Thread", "launch__registers_per_thread")[1]
    k.registers = int(regs) if regs is not None else None
    smem = [
        _scaled(v, u, _BYTES)
        for u, v in (get(LAUNCH, "Static Shared Memory Per Block"), get(LAUNCH, "Dynamic Shared Memory Per Block"))
    ]
    k.shared_bytes = int(sum(s for s in smem if s is not None)) if any(s is not None for s in smem) else None
    k.grid = _dims(first.get("Grid Size")) or _whole(get(LAUNCH, "Grid Size")[1])
    k.block = _dims(first.get("Block Size")) or _whole(get(LAUNCH, "Block Size")[1])
    k.dram_bytes = _dram_bytes(get, duration)
    k.stalls = _stalls(metrics)
    k.rules = list(dict.fromkeys(text for _, _, text in sorted(rules, key=lambda r: (r[0], -r[1]))))
    return k


def _limiter(limits: dict[str, float | None], theoretical: float | None) -> str | None:
    known = {k: v for k, v in limits.items() if v is not None}
    if not known or (theoretical is not None and theoretical >= 99.95):
        return None
    low = min(known.values())
    return " and ".join(_LIMITERS.get(k, k.lower()) for k, v in known.items() if v == low)


def _dram_bytes(get, duration_us: float | None) -> float | None:
    unit, total = get(MEM, "dram__bytes.sum")
    if total is not None:
        return _scaled(total, unit, _BYTES)
    (ru, read), (wu, write) = get(MEM, "dram__bytes_read.sum"), get(MEM, "dram__bytes_write.sum")
    if read is not None and write is not None:
        return (_scaled(read, ru, _BYTES) or 0.0) + (_scaled(write, wu, _BYTES) or 0.0)
    # the section header gives DRAM bandwidth (dram__bytes.sum.per_second): times the duration
    unit, rate = get(MEM, "Memory Throughput", "dram__bytes.sum.per_second")
    if rate is None or duration_us is None or not unit.lower().endswith(("/s", "/second")):
        return None
    per_s = _scaled(rate, unit.rsplit("/", 1)[0], _BYTES)
    return per_s * duration_us * 1e-6 if per_s is not None else None


_RAW_STALL = re.compile(r"issue_stalled_([a-z_]+?)(?:_per_\w+)?(?:\.\w+)?$")


def _stalls(metrics: dict[tuple[str, str], tuple[str, str]]) -> list[tuple[str, float]]:
    found: dict[str, float] = {}
    for (section, name), (_, value) in metrics.items():
        if section != WARPS:
            continue
        m = _RAW_STALL.search(name)
        label = name[len("Stall ") :] if name.startswith("Stall ") else (m.group(1).replace("_", " ") if m else None)
        v = number(value)
        if label and v is not None and label.lower() not in ("selected",):
            found.setdefault(label.lower(), v)
    return sorted(found.items(), key=lambda kv: -kv[1])[:3]


# ncu talking about its own collection (e.g. "The optional metric smsp__pcsamp_sample_count could
# not be found"), not about the kernel
_NOISE = re.compile(r"optional metric \S+ could not be found|Check the Warp Stall Sampling", re.I)


def _rule(row: dict[str, str]) -> tuple[int, float, str]:
    kind = (row.get("Rule Type") or "").strip().upper()
    speedup = number(row.get("Estimated Speedup")) or 0.0
    text = re.sub(r"\s*\(?https?://\S+\)?", "", row["Rule Description"]).strip()
    text = re.sub(r"\s*See the [^.]*? for (more )?details[^.]*\.", "", text)
    text = _shorten(re.sub(r"\s+", " ", text))
    tag = kind + (f" ~{speedup:.0f}%" if speedup >= 1 else "")
    rank = {"OPT": 0, "WRN": 0, "ERR": 0}.get(kind, 1)  # advice first, information after
    return rank, speedup, f"[{tag}] {text}" if tag else text


_ADVICE = re.compile(
    r"\b(try|consider|to reduce|to improve|to further|reduce|increase|avoid|use|start by|"
    r"look at|check)\b",
    re.I,
)


def _shorten(text: str) -> str:
    """The sentences with numbers or advice (not ncu's definitions of terms), in order, within _RULE_KEEP characters."""
    if len(text) <= _RULE_KEEP:
        return text
    sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z])", text)
    useful = [s for s in sentences if re.search(r"\d", s) or _ADVICE.search(s)] or sentences[:1]
    kept: list[str] = []
    for s in useful:
        if sum(len(k) + 1 for k in kept) + len(s) <= _RULE_KEEP:
            kept.append(s)
    return " ".join(kept) if kept else useful[0][: _RULE_KEEP - 3].rstrip() + "..."


def _dims(cell: str | None) -> str | None:
    """'(9, 32, 1)' -> '9x32x1'."""
    nums = re.findall(r"\d+", cell or "")
    return "x".join(nums) if nums else None


def _whole(v: float | None) -> str | None:
    return str(int(v)) if v is not None else None
