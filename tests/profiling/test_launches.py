"""profile's summary of many launches (issue 15, item 6): launches of one kernel grouped with one
total and one set of numbers, every kernel of the candidate's own shown, ncu's advice and the
`next:` hint aimed at kernels the model can change, and library time said as such. Built from
the real H200 captures (fixtures/README.md) with their kernels renamed."""

import csv
import io
from pathlib import Path

from cuda_agent.profiling.launches import OTHER, OWN, group_launches, origin, own_kernels
from cuda_agent.profiling.ncu import parse_ncu_csv
from cuda_agent.tools.profile_tool import SHOWN_KERNELS, kernels_text, next_hint

FIXTURES = Path(__file__).parent / "fixtures"
CUBLAS = "void cutlass_80_simt_sgemm_128x128_8x4_nn_align1<float>(cutlass::gemm::kernel::Params)"
OURS = "void swish_bias_groupnorm<4>(const float *, const float *, float *, int)"
GEMM_ADVICE = "limited by the number of required registers"  # the gemm capture's first rule
LN_ADVICE = "Consider moving frequently used data to shared memory."  # the layernorm capture's


def relabel(capture: str, rid: int, name: str) -> str:
    """The CSV rows of one captured launch, as launch `rid` of kernel `name` (header included)."""
    text = (FIXTURES / capture).read_text()
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    rows = list(csv.DictReader(lines[start:]))
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0]), quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writeheader()
    for row in rows:
        if row["ID"].strip().isdigit():
            w.writerow({**row, "ID": str(rid), "Kernel Name": name})
    return out.getvalue()


def forward_csv(launches: list[tuple[str, str]]) -> str:
    """One ncu output of several launches: (capture, kernel name) each, in launch order."""
    parts = [relabel(cap, i, name) for i, (cap, name) in enumerate(launches)]
    return parts[0] + "".join(p.split("\n", 1)[1] for p in parts[1:])


def strassen_forward():
    """The shape of the issue's level2/37 run: cuBLAS called six times, one fused epilogue of ours."""
    launches = [("ncu-gemm_bias_relu.csv", CUBLAS)] * 6 + [("ncu-layernorm.csv", OURS)]
    return parse_ncu_csv(forward_csv(launches))


def test_the_capture_can_be_relabelled():
    ks = strassen_forward()
    assert [k.id for k in ks] == list(range(7)) and {k.name for k in ks} == {CUBLAS, OURS}
    assert ks[0].rules and any(GEMM_ADVICE in r for r in ks[0].rules)


def test_launches_of_one_kernel_are_one_group_with_its_total():
    ks = strassen_forward()
    groups = group_launches(ks, ["swish_bias_groupnorm"])
    assert [(g.origin, len(g.launches)) for g in groups] == [("cuBLAS", 6), (OWN, 1)]
    assert groups[0].total_us == sum(k.duration_us for k in ks[:6])
    text = kernels_text(ks, 20.0, ["swish_bias_groupnorm"])
    assert text.startswith("ncu: 7 kernel launches (2 kernels) in one forward")
    assert text.count("cutlass_80_simt_sgemm") == 1 and "(cuBLAS)  6 launches, " in text
    assert "time: cuBLAS " in text and "in 6 launches; yours " in text
    # ncu's advice for cuBLAS's code is not the model's to follow: left out, and said so
    assert GEMM_ADVICE not in text and "ncu's advice left out: it is about cuBLAS's code, not yours" in text
    assert text.count("advice: ") >= 1 and LN_ADVICE in text  # the model's own kernel keeps its advice


def test_every_own_kernel_is_shown_however_little_time_it_takes():
    others = [f"void at::native::vectorized_elementwise_kernel<{i}>(int)" for i in range(SHOWN_KERNELS + 3)]
    launches = [("ncu-gemm_bias_relu.csv", name) for name in others] + [("ncu-layernorm.csv", OURS)]
    ks = parse_ncu_csv(forward_csv(launches))
    for k in ks:
        if k.name == OURS:
            k.duration_us = 0.5  # the least time of all: in the old top-6 cut it was summed away
    text = kernels_text(ks, 20.0, ["swish_bias_groupnorm", "never_called"])
    assert "swish_bias_groupnorm<4> (yours)  0.5 us" in text
    assert "... 3 more kernels not yours (3 launches)" in text
    assert "defined in kernels/ but not launched in this forward: never_called" in text


def test_own_kernels_come_from_the_build_and_win_over_library_looking_names(tmp_path):
    (tmp_path / "launchers.json").write_text('{"kernels": ["sgemm_bias_relu"], "launchers": []}')
    own = own_kernels(tmp_path)
    assert own == ["sgemm_bias_relu"] and own_kernels(tmp_path / "missing") is None
    assert origin("void sgemm_bias_relu<1>(const float *)", own) == OWN  # 'sgemm' alone would say cuBLAS
    assert origin(CUBLAS, own) == "cuBLAS" and origin("void cudnn::winograd(float *)", own) == "cuDNN"
    assert origin("void some_kernel(float *)", own) == OTHER
    assert origin("void some_kernel(float *)", None) == OWN  # unknown sources: what no library claims


def test_the_hint_aims_at_the_models_kernel_and_says_the_time_is_cuBLAS():
    ks = strassen_forward()
    hint = next_hint(ks, None, ["swish_bias_groupnorm"])
    # the longest kernel is cuBLAS's, capped by registers: the old hint said "try __launch_bounds__"
    assert "__launch_bounds__" not in hint
    share = round(100 * sum(k.duration_us for k in ks[:6]) / sum(k.duration_us for k in ks))
    assert hint.startswith(f"{share}% of the kernel time is in cuBLAS kernels") and "calling it less" in hint
    assert "in your own kernels, swish_bias_groupnorm<4> (" in hint and "memory throughput is the limit" in hint
    assert hint.endswith("then compile, verify and benchmark")


def test_the_hint_when_all_time_is_in_a_library_and_when_little_is():
    ks = strassen_forward()
    only_lib = next_hint(ks[:6], None, ["swish_bias_groupnorm"])
    assert only_lib.startswith("all ") and "us of kernel time is in cuBLAS kernels" in only_lib
    assert "__launch_bounds__" not in only_lib
    ours = ks[6].model_copy(update={"duration_us": 10 * sum(k.duration_us for k in ks[:6])})
    mostly_ours = next_hint([*ks[:6], ours], None, ["swish_bias_groupnorm"])
    assert mostly_ours.startswith("swish_bias_groupnorm<4> (") and "cuBLAS" not in mostly_ours
