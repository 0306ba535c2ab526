"""Loading tasks: file::Class, KernelBench files, the inputs sidecar, hashes and clear errors."""

from pathlib import Path

import pytest
import torch

from cuda_agent.task import TaskError, load_task, parse_task_ref, seed_everything

KB_STYLE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.lin = nn.Linear(features, features)

    def forward(self, x):
        return torch.relu(self.lin(x))

class Other(nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    return [torch.randn(8, 16)]

def get_init_inputs():
    return [16]
"""


@pytest.fixture
def kb_file(tmp_path) -> Path:
    p = tmp_path / "task.py"
    p.write_text(KB_STYLE)
    return p


def test_kernelbench_file_loads_model_by_default(kb_file):
    t = load_task(str(kb_file))
    assert t.class_name == "Model" and len(t.source_hash) == 16
    model = t.build_model(t.init_inputs(), "cpu")
    (x,) = t.draw_inputs(3, "cpu")
    assert model(x).shape == (8, 16)


def test_class_is_picked_with_double_colon(kb_file):
    t = load_task(f"{kb_file}::Other")
    assert t.class_name == "Other" and t.name == "task-Other"
    assert load_task(str(kb_file)).source_hash != t.source_hash  # the class is part of the hash


def test_inputs_are_a_pure_function_of_the_seed(kb_file):
    t = load_task(str(kb_file))
    a, b, c = t.draw_inputs(7, "cpu")[0], t.draw_inputs(7, "cpu")[0], t.draw_inputs(8, "cpu")[0]
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=pytest.mark.gpu)])
def test_inputs_seeded_for_their_device_are_those_of_a_full_seed(kb_file, device):
    """draw_inputs seeds only the CPU's and its device's generators (cheap: every timed call draws
    a set): the values are the ones a full seed (torch.manual_seed, every backend) gives."""
    t = load_task(str(kb_file))
    (fast,) = t.draw_inputs(11, device)
    seed_everything(11)
    with torch.device(device):
        (full,) = t.get_inputs()
    assert torch.equal(fast, full.to(device))


def test_same_init_seed_builds_identical_weights(kb_file):
    t = load_task(str(kb_file))
    m1, m2 = t.build_model([16], "cpu", seed=5), t.build_model([16], "cpu", seed=5)
    assert all(torch.equal(p, q) for p, q in zip(m1.state_dict().values(), m2.state_dict().values()))


def test_missing_class_names_the_ones_that_exist(kb_file):
    with pytest.raises(TaskError, match=r"no class Nope .*Model"):
        load_task(f"{kb_file}::Nope")


def test_missing_input_functions_say_how_to_give_them(tmp_path):
    p = tmp_path / "bare.py"
    p.write_text("import torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n")
    with pytest.raises(TaskError, match=r"get_inputs or get_init_inputs.*bare\.inputs\.py.*--inputs"):
        load_task(str(p))


def test_sidecar_supplies_missing_functions(tmp_path):
    p = tmp_path / "bare.py"
    p.write_text("import torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n        return x + 1\n")
    side = tmp_path / "bare.inputs.py"
    side.write_text(
        "import torch\ndef get_inputs():\n    return [torch.ones(3)]\ndef get_init_inputs():\n    return []\n"
    )
    t = load_task(str(p))
    assert t.inputs_path == side.resolve()
    h1 = t.source_hash
    side.write_text(side.read_text().replace("ones(3)", "ones(4)"))
    assert load_task(str(p)).source_hash != h1  # the sidecar is part of the task


def test_inputs_flag_names_another_file(tmp_path):
    p = tmp_path / "bare.py"
    p.write_text("import torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n")
    other = tmp_path / "shapes.py"
    other.write_text(
        "import torch\ndef get_inputs():\n    return [torch.ones(2)]\ndef get_init_inputs():\n    return []\n"
    )
    assert load_task(str(p), inputs=other).inputs_path == other.resolve()
    with pytest.raises(TaskError, match="inputs file not found"):
        load_task(str(p), inputs=tmp_path / "nope.py")


def test_bad_paths_and_import_errors_are_one_line(tmp_path):
    with pytest.raises(TaskError, match="task file not found"):
        parse_task_ref(str(tmp_path / "missing.py"))
    bad = tmp_path / "broken.py"
    bad.write_text("import torch\nraise RuntimeError('boom')\n")
    with pytest.raises(TaskError, match="importing .*broken.py failed: RuntimeError: boom"):
        load_task(str(bad))
