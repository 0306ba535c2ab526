"""agent/script_device.py: which scripts refuse the CPU (those that say their kernels need a GPU), and
what the one line says; anything else is left to the script's own checks."""

import json

import pytest

from cuda_agent.agent.script_device import cpu_refusal


def script(tmp_path, **keys):
    path = tmp_path / "demo.json"
    path.write_text(json.dumps({"name": "s", "responses": ["hi"], **keys}))
    return path


def test_a_script_that_needs_a_gpu_names_its_twins_command(tmp_path):
    line = cpu_refusal(script(tmp_path, needs_gpu=True, cpu_variant="demo_cpu.json"), "t/model.py")
    assert line.startswith(f"{tmp_path / 'demo.json'} writes kernels that launch on a GPU")
    assert (
        line.endswith(
            f"`cuda-agent optimize t/model.py --script {tmp_path / 'demo_cpu.json'} --device cpu --no-compile-baseline`"
        )
        and "\n" not in line
    )


@pytest.mark.parametrize("variant, task", [(None, "t.py"), ("", "t.py"), (3, "t.py"), ("demo_cpu.json", None)])
def test_without_a_twin_or_a_task_it_says_to_use_a_gpu(tmp_path, variant, task):
    keys = {"needs_gpu": True} if variant is None else {"needs_gpu": True, "cpu_variant": variant}
    assert cpu_refusal(script(tmp_path, **keys), task).endswith(": run it on a machine with a GPU")


@pytest.mark.parametrize("keys", [{}, {"needs_gpu": False}, {"needs_gpu": "yes"}, {"needs_gpu": 1}])
def test_a_script_that_does_not_say_it_needs_a_gpu_runs(tmp_path, keys):
    assert cpu_refusal(script(tmp_path, **keys), "t.py") is None


@pytest.mark.parametrize("text", [None, "not json", "[1, 2]", "\udcff"])
def test_an_unreadable_or_list_script_is_left_to_the_scripts_own_check(tmp_path, text):
    path = tmp_path / "s.json"
    if text is not None:
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
    assert cpu_refusal(path, "t.py") is None
