"""FLOPs and minimum bytes of a task (counted on CPU and on meta), the peak table, and the text."""

import textwrap

import pytest

from cuda_agent.profiling.roofline import (
    Peaks,
    TaskCost,
    count_task,
    gpu_peaks,
    roofline,
    roofline_text,
    task_flops_bytes,
)
from cuda_agent.task import load_task

M, K, N = 64, 96, 48
LINEAR = f"""
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.fc = nn.Linear(k, n)

    def forward(self, x):
        return self.fc(x)

def get_inputs():
    return [torch.randn({M}, {K})]

def get_init_inputs():
    return [{K}, {N}]
"""
ELEMENTWISE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0

def get_inputs():
    return [torch.randn(128, 256)]

def get_init_inputs():
    return []
"""
DATA_DEPENDENT = ELEMENTWISE.replace("return torch.relu(x) * 2.0 + 1.0", "return x * float(x.abs().max().item())")


def task_from(tmp_path, source, name="model.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return load_task(str(path), module_name=f"roofline_test_{path.stem}")


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_linear_is_2mnk_flops_on_its_tensors_bytes(tmp_path, device):
    cost = task_flops_bytes(task_from(tmp_path, LINEAR), device)
    assert cost.flops == 2 * M * N * K
    assert cost.bytes == 4 * (M * K + M * N + N * K + N)  # x, y, weight, bias, each once
    assert (cost.dtype, cost.device) == ("float32", device)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_elementwise_has_no_counted_flops_and_reads_and_writes_once(tmp_path, device):
    cost = task_flops_bytes(task_from(tmp_path, ELEMENTWISE), device)
    assert cost.flops == 0 and cost.bytes == 2 * 128 * 256 * 4


def test_count_task_falls_back_to_the_cpu_where_meta_cannot_run(tmp_path):
    task = task_from(tmp_path, DATA_DEPENDENT, "datadep.py")
    with pytest.raises(Exception):
        task_flops_bytes(task, "meta")
    cost = count_task(task)
    assert cost.device == "cpu" and cost.bytes == 2 * 128 * 256 * 4
    assert count_task(task_from(tmp_path, LINEAR)).device == "meta"


def test_peak_table_and_overrides():
    h200, h100 = gpu_peaks("NVIDIA H200"), gpu_peaks("NVIDIA H100 80GB HBM3")
    assert (h200.hbm_tbps, h200.fp32_tflops, h200.tensor_tflops, h200.source) == (4.8, 67.0, 990.0, "datasheet")
    assert h100.hbm_tbps == 3.35 and h100.gpu == "H100 SXM"
    assert gpu_peaks("NVIDIA A100-SXM4-80GB") is None and gpu_peaks(None) is None
    mine = gpu_peaks("NVIDIA H200", {"peak_hbm_tbps": 4.0})
    assert (mine.hbm_tbps, mine.fp32_tflops, mine.source) == (4.0, 67.0, "settings")
    assert gpu_peaks("NVIDIA A100", {"peak_hbm_tbps": 2.0}) is None  # half a table is no table
    a100 = gpu_peaks("NVIDIA A100", {"peak_hbm_tbps": 2.0, "peak_fp32_tflops": 19.5, "peak_tensor_tflops": 312})
    assert (a100.gpu, a100.fp32_tflops, a100.tensor_tflops) == ("NVIDIA A100", 19.5, 312.0)


H200 = Peaks("H200 SXM", 67.0, 990.0, 4.8, "datasheet")


def test_floors_and_the_measured_fraction():
    gemm = TaskCost(
        flops=2 * 4096 * 2048 * 2048, bytes=4 * (4096 * 2048 * 2 + 2048 * 2048 + 2048), dtype="float32", device="meta"
    )
    r = roofline(gemm, H200, measured_us=1205.6)
    assert r.bound == "compute-bound" and r.ridge == pytest.approx(67 / 4.8)
    assert r.compute_floor_us == pytest.approx(gemm.flops / 67e12 * 1e6) and r.floor_us == r.compute_floor_us
    text = roofline_text(gemm, H200, 1205.6)
    assert 2 <= len(text.splitlines()) <= 4 and "compute-bound" in text
    assert "67 TFLOP/s fp32 non-tensor" in text and "2.35x the floor (43% of the roofline)" in text

    bf16 = gemm.model_copy(update={"dtype": "bfloat16"})
    assert roofline(bf16, H200).compute_floor_us == pytest.approx(gemm.flops / 990e12 * 1e6)


def test_memory_bound_and_unknown_gpu_text():
    norm = TaskCost(flops=0, bytes=268_468_224, dtype="float32", device="meta")
    r = roofline(norm, H200, 64.9)
    assert r.bound == "memory-bound" and r.memory_floor_us == pytest.approx(268_468_224 / 4.8e12 * 1e6)
    text = roofline_text(norm, H200, 64.9)
    assert "memory-bound" in text and "1.16x the floor" in text
    assert "FLOPs counted for matmul, conv and attention only" in text
    assert len(roofline_text(norm, H200).splitlines()) == 2  # no measurement, no third line
    unknown = roofline_text(norm, None, 64.9)
    assert "peak_hbm_tbps" in unknown and len(unknown.splitlines()) == 2
