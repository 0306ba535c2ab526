"""parse_ncu_csv on the real H200 captures of layernorm and gemm (fixtures/README.md)
and, value by value, on small CSVs that each exercise one rule of the format."""

from pathlib import Path

import pytest

from cuda_agent.profiling.ncu import parse_ncu_csv

FIXTURES = Path(__file__).parent / "fixtures"
WARPS = "Warp State Statistics"
HEAD = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
    '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type",'
    '"Rule Description","Estimated Speedup Type","Estimated Speedup"'
)


def row(section, name, unit, value, rid="0", kernel="k(float *)", block="(256, 1, 1)", grid="(4, 1, 1)"):
    return (
        f'"{rid}","7","python3","host","{kernel}","1","7","{block}","{grid}","0","9.0",'
        f'"{section}","{name}","{unit}","{value}",'
    )


def rule(section, name, kind, text, speedup="", rid="0"):
    return (
        f'"{rid}","7","python3","host","k(float *)","1","7","(256, 1, 1)","(4, 1, 1)","0","9.0",'
        f'"{section}","","","","{name}","{kind}","{text}","global","{speedup}"'
    )


def csv_of(*rows):
    return "\n".join([HEAD, *rows]) + "\n"


# -- the captures: what the code of each example fixes, and what any real profile must satisfy


def test_layernorm_capture():
    (k,) = parse_ncu_csv((FIXTURES / "ncu-layernorm.csv").read_text())
    assert "ln_rows_reg" in k.name and k.block == "512x1x1" and k.grid == "8192x1x1"
    assert k.shared_bytes == 64  # red[16] floats, no dynamic shared memory
    assert 0 < k.duration_us < 10_000 and k.registers and k.registers <= 128
    assert k.mem_pct > k.sm_pct and 0 < k.dram_pct <= 100  # a row-wise norm is memory-bound
    assert 0 < k.achieved_occupancy <= k.theoretical_occupancy + 1 <= 101
    # it must read x and write y (8192 x 4096 fp32 each) at least once
    assert k.dram_bytes >= 0.9 * 2 * 8192 * 4096 * 4
    assert k.stalls and all(v >= 0 for _, v in k.stalls) and len(k.stalls) <= 3
    assert k.rules and all("http" not in r for r in k.rules)


def test_gemm_capture():
    (k,) = parse_ncu_csv((FIXTURES / "ncu-gemm_bias_relu.csv").read_text())
    assert "sgemm_bias_relu" in k.name and k.block == "256x1x1" and k.grid == "16x32x1"
    assert k.shared_bytes == 2 * 2 * 8 * 132 * 4  # As and Ws, double-buffered, pitch 132
    assert k.registers <= 128  # __launch_bounds__(256, 2)
    assert k.sm_pct > k.dram_pct  # 4096x2048x2048 fp32 GEMM: compute, not DRAM
    assert k.occupancy_limiter and k.theoretical_occupancy <= 50
    assert k.stalls and k.rules


def test_the_h200_captures_parse_to_these_numbers():
    """The real captures (ncu 2025.3, H200, 2026-11-30; benchmarks/gpu_suite.sh capture)."""
    (ln,) = parse_ncu_csv((FIXTURES / "ncu-layernorm.csv").read_text())
    assert ln.name.startswith("void ln_rows_reg<2>(") and ln.duration_us == pytest.approx(64.512)
    assert (ln.sm_pct, ln.mem_pct, ln.achieved_occupancy, ln.theoretical_occupancy) == (48.71, 78.73, 90.83, 100.0)
    assert ln.occupancy_limiter is None and (ln.registers, ln.shared_bytes) == (32, 64)
    assert ln.dram_bytes == pytest.approx(244.2e6, rel=1e-3)
    assert [s for s, _ in ln.stalls] == ["long scoreboard", "barrier", "short scoreboard"]
    assert (
        ln.rules[0].startswith("[OPT ~44%]") and "Consider moving frequently used data to shared memory." in ln.rules[0]
    )
    assert not [r for r in ln.rules if "optional metric" in r or "Warp Stall Sampling" in r]  # ncu's own noise
    (gemm,) = parse_ncu_csv((FIXTURES / "ncu-gemm_bias_relu.csv").read_text())
    assert gemm.name.startswith("void sgemm_bias_relu<1>(") and gemm.duration_us == pytest.approx(909.312)
    assert (gemm.occupancy_limiter, gemm.registers, gemm.shared_bytes) == ("registers", 127, 16896)
    assert (gemm.grid, gemm.block) == ("16x32x1", "256x1x1")
    assert gemm.rules[0].startswith("[OPT ~75%]") and "limited by the number of required registers" in gemm.rules[0]


# -- the format, one rule at a time


def test_units_separators_and_grid_from_columns():
    text = csv_of(
        row("GPU Speed Of Light Throughput", "Duration", "usecond", "1,234.5"),
        row("Launch Statistics", "Registers Per Thread", "register/thread", "40"),
        row("Launch Statistics", "Static Shared Memory Per Block", "Kbyte/block", "16.90"),
        row("Launch Statistics", "Dynamic Shared Memory Per Block", "byte/block", "100"),
    )
    (k,) = parse_ncu_csv(text)
    assert k.duration_us == 1234.5 and k.registers == 40 and k.shared_bytes == 16_900 + 100
    assert (k.grid, k.block) == ("4x1x1", "256x1x1")


@pytest.mark.parametrize(
    "unit,value,us",
    [
        ("ns", "64864", 64.864),
        ("nsecond", "1,000", 1.0),
        ("us", "2.5", 2.5),
        ("ms", "1.25", 1250.0),
        ("msecond", "0.5", 500.0),
        ("s", "0.001", 1000.0),
    ],
)
def test_duration_units(unit, value, us):
    (k,) = parse_ncu_csv(csv_of(row("GPU Speed Of Light Throughput", "Duration", unit, value)))
    assert k.duration_us == pytest.approx(us)


def test_missing_metrics_are_none_and_odd_values_do_not_crash():
    (k,) = parse_ncu_csv(
        csv_of(
            row("GPU Speed Of Light Throughput", "Duration", "furlong", "3"),
            row("Occupancy", "Achieved Occupancy", "%", "n/a"),
            row("Launch Statistics", "Registers Per Thread", "register/thread", ""),
        )
    )
    assert k.duration_us is None and k.achieved_occupancy is None and k.registers is None
    assert (k.sm_pct, k.dram_bytes, k.shared_bytes, k.occupancy_limiter, k.stalls, k.rules) == (
        None,
        None,
        None,
        None,
        [],
        [],
    )


def test_non_csv_lines_are_skipped_and_launches_keep_their_order():
    text = (
        "==PROF== Connected to process 7 (/usr/bin/python3)\nsingle_run: one forward done\n"
        + csv_of(
            row("GPU Speed Of Light Throughput", "Duration", "ns", "3000", rid="1", kernel="b()"),
            row("GPU Speed Of Light Throughput", "Duration", "ns", "1000", rid="0", kernel="a()"),
        )
        + "==PROF== Disconnected from process 7\n"
    )
    ks = parse_ncu_csv(text)
    assert [(k.id, k.name, k.duration_us) for k in ks] == [(1, "b()", 3.0), (0, "a()", 1.0)]
    assert parse_ncu_csv("==PROF== nothing\n") == [] and parse_ncu_csv("") == []


def test_occupancy_limiter_is_the_smallest_block_limit():
    limits = {"Registers": "2", "Shared Mem": "2", "Warps": "8", "SM": "32"}
    rows = [row("Occupancy", f"Block Limit {n}", "block", v) for n, v in limits.items()]
    (k,) = parse_ncu_csv(csv_of(*rows, row("Occupancy", "Theoretical Occupancy", "%", "25")))
    assert k.occupancy_limiter == "registers and shared memory"
    (k,) = parse_ncu_csv(csv_of(*rows, row("Occupancy", "Theoretical Occupancy", "%", "100")))
    assert k.occupancy_limiter is None  # nothing limits a full SM


def test_raw_metric_names_and_dram_bytes():
    (k,) = parse_ncu_csv(
        csv_of(
            row("Command line profiler metrics", "gpu__time_duration.sum", "us", "10"),
            row("Command line profiler metrics", "launch__registers_per_thread", "register/thread", "32"),
            row("Memory Workload Analysis", "dram__bytes_read.sum", "Mbyte", "2.5"),
            row("Memory Workload Analysis", "dram__bytes_write.sum", "Kbyte", "500"),
            row(WARPS, "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "", "9"),
            row(WARPS, "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", "", "1"),
            row(WARPS, "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio", "", "20"),
        )
    )
    assert k.duration_us == 10 and k.registers == 32 and k.dram_bytes == pytest.approx(3.0e6)
    assert k.stalls == [("long scoreboard", 9.0), ("wait", 1.0)]  # "selected" is issuing, not a stall


def test_dram_bytes_from_the_bandwidth_header():
    (k,) = parse_ncu_csv(
        csv_of(
            row("GPU Speed Of Light Throughput", "Duration", "ms", "2"),
            row("Memory Workload Analysis", "Memory Throughput", "Tbyte/s", "3"),
        )
    )
    assert k.dram_bytes == pytest.approx(6e9)


def test_rules_are_kept_as_text_deduplicated_advice_first():
    long = (
        "A wave of thread blocks is defined as the maximum number of blocks that can run at once. "
        * 3
        + "This launch leaves a partial wave of 248 blocks. Try launching a grid with no partial wave. "
        "See the Hardware Model (https://docs.nvidia.com/x#y) description for more details on launches."
    )
    text = csv_of(
        rule("SpeedOfLight_RooflineChart", "SOLFPRoofline", "INF", "The workload achieved 1% of FP32 peak."),
        rule("Occupancy", "AchievedOccupancy", "OPT", "Occupancy 60%, see the guide.", "8.5"),
        rule("LaunchStats", "LaunchConfiguration", "OPT", long, "50"),
        rule("Occupancy", "AchievedOccupancy", "OPT", "Occupancy 60%, see the guide.", "8.5"),
    )
    (k,) = parse_ncu_csv(text)
    assert len(k.rules) == 3
    assert k.rules[0] == (
        "[OPT ~50%] This launch leaves a partial wave of 248 blocks. Try launching a grid with no partial wave."
    )
    assert k.rules[1] == "[OPT ~8%] Occupancy 60%, see the guide."
    assert k.rules[2] == "[INF] The workload achieved 1% of FP32 peak."
