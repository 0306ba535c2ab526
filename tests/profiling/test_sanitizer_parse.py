"""parse_sanitizer on the four real fault captures (fixtures/README.md) and on
the report shapes other compute-sanitizer versions print."""

from pathlib import Path

from cuda_agent.profiling.sanitizer import parse_sanitizer
from cuda_agent.profiling.sanitizer_parse import MAX_FINDINGS

FIXTURES = Path(__file__).parent / "fixtures"
P = "========="


def capture(tool, candidate):
    return parse_sanitizer((FIXTURES / f"sanitizer-{tool}-{candidate}.txt").read_text(), tool)


# -- the captures: what each fault candidate's code fixes


def test_memcheck_finds_the_off_by_one_write():
    r = capture("memcheck", "oob_write")
    assert r.complete and not r.clean and r.errors >= 1
    f = r.findings[0]
    assert f.kind == "invalid __global__ write of 4 bytes" and f.kernel == "relu_affine_kernel"
    assert f.location == "relu_affine.cu:8"
    assert (f.thread, f.block) == ("(0,0,0)", "(16384,0,0)")  # i == n == 4096 * 1024
    assert "out of bounds" in f.address


def test_memcheck_folds_the_wild_writes_into_one_finding():
    r = capture("memcheck", "illegal_address")
    writes = [f for f in r.findings if f.kind.startswith("invalid __global__ write")]
    assert len(writes) == 1 and writes[0].location == "relu_affine.cu:11" and writes[0].count >= 1
    assert len(r.findings) <= MAX_FINDINGS and r.errors >= writes[0].count


def test_racecheck_names_both_lines_of_the_race():
    r = capture("racecheck", "shared_race")
    assert r.complete and r.hazards >= 1 and r.findings
    f = r.findings[0]
    assert f.kind.startswith("shared-memory race") and f.kernel == "relu_affine_kernel"
    assert "relu_affine.cu:9" in f.kind and "relu_affine.cu:11" in f.kind and f.hazards >= 1


def test_initcheck_finds_the_read_of_the_unwritten_output():
    r = capture("initcheck", "uninit_global")
    assert r.complete and r.errors >= 1
    f = r.findings[0]
    assert f.kind.startswith("uninitialized __global__ read") and f.location == "relu_affine.cu:12"


def test_the_h200_captures_parse_to_these_numbers():
    """compute-sanitizer 2025.3 on the H200, 2026-11-30 (fixtures/README.md)."""
    wild = capture("memcheck", "illegal_address")
    assert (wild.errors, wild.not_printed, wild.findings[0].count, wild.app_failed) == (180898, 180878, 20, True)
    oob = capture("memcheck", "oob_write")
    assert (
        oob.errors == 3
        and oob.app_failed
        and [f.kind for f in oob.findings[1:]]
        == [
            "CUDA API error cudaErrorLaunchFailure (unspecified launch failure) on cudaDeviceSynchronize",
            "CUDA API error cudaErrorLaunchFailure (unspecified launch failure) on cudaGetLastError",
        ]
    )
    race = capture("racecheck", "shared_race")
    assert (race.hazards, race.errors, race.warnings) == (2, 1, 1)
    assert [f.hazards for f in race.findings] == [10_000_000]  # the tool's cap, said in a note
    assert race.notes and race.notes[0].startswith("Warning: Maximum number of hazards reached")
    init = capture("initcheck", "uninit_global")  # the fault reads 32 unwritten elements
    assert (init.errors, init.not_printed, init.findings[0].count, init.app_failed) == (32, 12, 20, False)


# -- other shapes of the same reports


def test_older_and_unindented_report_lines():
    text = "\n".join(
        [
            f"{P} CUDA-MEMCHECK",
            f"{P} Invalid __global__ write of size 4",  # old: no "bytes"; "Address ... is out of bounds"
            f"{P}     at 0x00000148 in kernel(int*, int)",
            f"{P}     by thread (256,0,0) in block (10,0,0)",
            f"{P}     Address 0x7f1234567890 is out of bounds",
            P,
            f"{P} Invalid __global__ write of size 4 bytes",  # docs: indentation lost
            f"{P} at 0x30 in /home/u/memcheck_demo.cu:6:unaligned_kernel(void)",
            f"{P} by thread (0,0,0) in block (0,0,0)",
            f"{P} Address 0x15551a800001 is misaligned",
            P,
            f"{P} ERROR SUMMARY: 2 errors",
        ]
    )
    r = parse_sanitizer(text)
    a, b = r.findings
    assert (a.kernel, a.location, a.thread, a.block) == ("kernel", None, "(256,0,0)", "(10,0,0)")
    assert a.address == "0x7f1234567890 out of bounds" and a.kind == "invalid __global__ write of 4 bytes"
    assert (b.kernel, b.location, b.address) == ("unaligned_kernel", "memcheck_demo.cu:6", "0x15551a800001 misaligned")
    assert r.errors == 2


def test_clean_runs():
    assert parse_sanitizer(f"{P} COMPUTE-SANITIZER\nhello\n{P} ERROR SUMMARY: 0 errors\n").clean
    race = parse_sanitizer(f"{P} RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n", "racecheck")
    assert race.clean and (race.hazards, race.errors, race.warnings) == (0, 0, 0)


def test_a_run_that_never_reached_its_summary_is_incomplete():
    r = parse_sanitizer(
        f"{P} COMPUTE-SANITIZER\n{P} Error: Target application terminated before first "
        f"instrumented API call\n{P} Error: couldn't find exit code.\n"
    )
    assert not r.complete and not r.clean and not r.findings
    assert r.notes == [
        "Error: Target application terminated before first instrumented API call",
        "Error: couldn't find exit code.",
    ]


def test_a_race_split_over_lines_and_the_hazard_report_mode():
    text = "\n".join(
        [
            f"{P} Error: Race reported between Write access at buggy(float *, int)+0x580",
            f"{P}     in memory_errors.cu:25",
            f"{P}     and Read access at buggy(float *, int)+0x890 in memory_errors.cu:31",
            f"{P}     [4080 hazards]",
            P,
            (
                f"{P} Warning: (Warp Level Programming) Potential RAW hazard detected at __shared__ 0x8c in block "
                "(0,0,0) :"
            ),
            f"{P}     Write Thread (35,0,0) at sumKernel(int *, int *)+0x90 in warp_error.cu:44",
            f"{P}     Read Thread (32,0,0) at sumKernel(int *, int *)+0x120 in warp_error.cu:56",
            f"{P}     Current Value : 35",
            P,
            f"{P} RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)",
        ]
    )
    r = parse_sanitizer(text, "racecheck")
    race, hazard = r.findings
    assert race.kind == "shared-memory race: Write at memory_errors.cu:25 vs Read at memory_errors.cu:31"
    assert race.kernel == "buggy" and race.hazards == 4080
    assert hazard.kernel == "sumKernel" and "RAW hazard" in hazard.kind and "warp_error.cu:44" in hazard.kind
    assert (r.hazards, r.errors, r.warnings) == (2, 1, 1)


def test_findings_are_deduplicated_and_bounded():
    report = [
        f"{P} Invalid __global__ read of size 16 bytes\n{P}     at k{i % 15}+0x10 in a.cu:{i % 15}\n"
        f"{P}     by thread ({i},0,0) in block (0,0,0)\n{P}"
        for i in range(60)
    ]
    r = parse_sanitizer(
        "\n".join(report) + f"\n{P} ERROR SUMMARY: 2,752 errors\n"
        f"{P} ERROR SUMMARY: 2,692 errors were not printed. Use --print-limit option to adjust\n"
    )
    assert len(r.findings) == MAX_FINDINGS and all(f.count == 4 for f in r.findings)
    assert r.findings[0].thread == "(0,0,0)"  # the first report of each is kept
    assert (r.errors, r.not_printed) == (2752, 2692)


def test_program_output_between_reports_is_ignored():
    text = (
        f"{P} Invalid __shared__ read of size 4 bytes\nprinted by the program\n"
        f"{P}     at k(float *)+0x40 in s.cu:3\n{P}\n{P} ERROR SUMMARY: 1 error\n"
    )
    (f,) = parse_sanitizer(text).findings
    assert (f.kind, f.kernel, f.location) == ("invalid __shared__ read of 4 bytes", "k", "s.cu:3")
