"""What the model sees first: a compact system prompt that points at SKILL.md's sections instead of
embedding the file, short tool schemas, and a task message that names the task as its user knows
it and the GPU (or says there is none). The first request's size is pinned with a real tokenizer
(SmolLM2-135M-Instruct's), for both tool protocols, so it cannot grow past a small window unseen."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from smollm2 import smollm2_tokenizer  # tests/helpers

from cuda_agent.agent import prompts
from cuda_agent.agent.loop import AgentConfig, run_agent
from cuda_agent.agent.prompts import skill_sections, skill_text, system_message, task_message
from cuda_agent.agent.scripted_model import ScriptedModel
from cuda_agent.agent.text_protocol import to_text_messages
from cuda_agent.environment import Environment
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.single_run import DEFAULT_SEED
from cuda_agent.profiling.roofline import DATASHEET, GpuFacts, gpu_facts
from cuda_agent.profiling.sanitizer import sanitizer_command
from cuda_agent.settings import ToolSettings
from cuda_agent.task import load_task, task_label
from cuda_agent.tools.base import compact_schema
from cuda_agent.tools.registry import default_tools, schemas
from cuda_agent.tools.sanitize_tool import Sanitize
from cuda_agent.trajectory import TrajectoryWriter

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "scale_add_small" / "model.py"
H200 = GpuFacts(name="NVIDIA H200", arch="sm_90a", peaks=DATASHEET["H200"])
FIRST_REQUEST_LIMIT = 3000  # tokens: system + task + tool schemas, what an 8k-window model must fit
SYSTEM_LIMIT = 1500


@pytest.fixture(scope="module")
def tokenizer(request, tmp_path_factory):
    return smollm2_tokenizer(request, tmp_path_factory)


def first_request(tmp_path: Path, monkeypatch, *, native: bool, task: Path = TASK, gpu: GpuFacts | None = H200):
    """The messages and tools of the loop's first query, as the model's client sends them (a
    text-protocol client folds the tools into the system prompt), with the GPU facts injected."""
    monkeypatch.setattr(prompts, "gpu_facts", lambda device, **kw: gpu)
    cfg = EvalConfig(device="cpu", baselines=["eager", "compile"], cache_dir=tmp_path / "cache")
    model = ScriptedModel([{"tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]}], native_tools=native)
    with Environment.create(load_task(str(task)), runs_dir=tmp_path / "runs", eval_config=cfg) as env:
        with TrajectoryWriter(tmp_path / "t.jsonl") as writer:
            run_agent(model, env, AgentConfig(), writer)
        assert (env.workspace.root / "SKILL.md").read_text() == skill_text()  # the file the section table describes
    query = model.calls[0]
    if native:
        return query["messages"], query["tools"]
    return to_text_messages(query["messages"], query["tools"]), []


def count(tokenizer, messages: list[dict], tools: list[dict]) -> int:
    """The chat as SmolLM2's template renders it, plus the tool definitions as JSON (its template has
    no place for tools; a provider sends them beside the messages)."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"]) + (
        len(tokenizer(json.dumps(tools), add_special_tokens=False)["input_ids"]) if tools else 0
    )


@pytest.mark.parametrize("native", [True, False], ids=["native", "text"])
def test_the_first_request_fits_a_small_window(tokenizer, tmp_path, monkeypatch, native):
    messages, tools = first_request(tmp_path, monkeypatch, native=native)
    total = count(tokenizer, messages, tools)
    system = len(tokenizer(system_message(native_tools=native), add_special_tokens=False)["input_ids"])
    assert system <= SYSTEM_LIMIT, f"the system prompt is {system} tokens"
    assert total <= FIRST_REQUEST_LIMIT, f"the first request is {total} tokens (system {system}); docs/agent.md"
    assert "GPU: NVIDIA H200" in messages[1]["content"]  # measured with the GPU line in


def test_the_system_prompt_points_at_skill_sections_instead_of_embedding_them():
    text = skill_text()
    lines = text.splitlines()
    sections = skill_sections(text)
    assert len(sections) >= 10 and sections[-1].end == len(lines)
    for s, after in zip(sections, sections[1:] + [None]):
        assert lines[s.start - 1] == f"## {s.title}"  # view_file start_line lands on the heading
        assert after is None or after.start == s.end + 1
    for native in (True, False):
        system = system_message(native_tools=native)
        for s in sections:
            assert f"lines {s.start}-{s.end}: {s.title}\n" in system
        assert "view_file" in system and "SKILL.md" in system
        assert "Coalescing" not in system and "scale_add_relu_vec4" not in system  # SKILL.md's body is not in it


def test_skill_sections_skip_headings_inside_code_and_end_at_the_next_heading():
    text = "# SKILL\n\n## 1. One\ntext\n```python\n## not a heading\n```\n## 2. Two\nlast\n"
    assert [(s.start, s.end, s.title) for s in skill_sections(text)] == [(3, 7, "1. One"), (8, 9, "2. Two")]


def test_the_task_message_names_the_task_as_its_user_knows_it(tmp_path, monkeypatch):
    task = tmp_path / "KernelBench" / "level2" / "37_Matmul_Swish.py"
    task.parent.mkdir(parents=True)
    shutil.copy(TASK, task)
    messages, _ = first_request(tmp_path, monkeypatch, native=True, task=task)
    assert "(task `level2/37_Matmul_Swish`)" in messages[1]["content"]
    assert not any("cuda-agent-ref" in m["content"] for m in messages)  # never the harness's private copy


def test_task_labels():
    assert task_label("/home/u/examples/scale_add_small/model.py") == "examples/scale_add_small"
    assert task_label("/data/KernelBench/level2/37_Matmul_Swish.py") == "level2/37_Matmul_Swish"
    assert task_label("/data/level1/19_ReLU.py", "Relu2") == "level1/19_ReLU::Relu2"
    assert task_label("/model.py") == "model"


def _task_message(gpu: GpuFacts | None, device: str) -> str:
    return task_message(
        load_task(str(TASK)), device=device, baselines=["eager", "compile"], limits=AgentConfig().model_dump(), gpu=gpu
    )


def test_the_task_message_names_the_gpu_its_arch_and_peaks():
    text = _task_message(H200, "cuda:0")
    assert (
        "GPU: NVIDIA H200, nvcc builds for sm_90a; datasheet peaks (H200 SXM): HBM 4.8 TB/s, fp32 67.0 "
        "TFLOP/s (CUDA cores), fp16/bf16 990.0 TFLOP/s (dense tensor cores).\n"
        "Evaluations run on `cuda:0`; baselines: eager, compile."
    ) in text
    unknown = _task_message(GpuFacts(name="NVIDIA RTX 6000", arch="sm_89", peaks=None), "cuda:1")
    assert "GPU: NVIDIA RTX 6000, nvcc builds for sm_89; its peak bandwidth and FLOP/s are not known here." in unknown


def test_without_a_gpu_the_task_message_says_so():
    text = _task_message(None, "cpu")
    assert "No GPU: evaluations run on `cpu`" in text and "\nGPU:" not in text and "TFLOP" not in text


def test_gpu_facts_come_from_the_roofline_table_and_settings():
    assert gpu_facts("cpu") is None
    h200 = gpu_facts("cuda:0", gpu_name="NVIDIA H200", arch="sm_90a")
    assert h200 == H200
    assert gpu_facts("cuda:0", gpu_name="NVIDIA RTX 6000", arch="sm_89").peaks is None
    own = gpu_facts("cuda:0", gpu_name="NVIDIA H100 PCIe", arch="sm_90a", settings={"peak_hbm_tbps": 2.0})
    assert (own.peaks.hbm_tbps, own.peaks.fp32_tflops, own.peaks.source) == (2.0, 67.0, "settings")


def test_tool_schemas_are_short():
    for schema in schemas(default_tools(ToolSettings(allow_shell=True))):
        fn = schema["function"]
        assert len(fn["description"]) <= 180 and fn["description"].count(". ") <= 1, fn["name"]
        assert '"title"' not in json.dumps(fn["parameters"]), fn["name"]
        for prop in fn["parameters"].get("properties", {}).values():
            assert len(prop.get("description", "")) <= 120, fn["name"]


def test_compact_schema_keeps_what_the_model_needs():
    schema = {
        "title": "Args",
        "type": "object",
        "additionalProperties": False,
        "required": ["title"],
        "properties": {
            "title": {"title": "Title", "type": "string"},
            "kernel": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": None,
                "title": "Kernel",
                "description": "its name",
            },
        },
    }
    assert compact_schema(schema) == {
        "type": "object",
        "required": ["title"],
        "properties": {
            "title": {"type": "string"},
            "kernel": {"type": "string", "default": None, "description": "its name"},
        },
    }


def test_sanitize_says_which_inputs_it_runs_on():
    assert f"one input set of the task's own shapes (get_inputs(), seed {DEFAULT_SEED})" in Sanitize.description
    assert "--seed" not in sanitizer_command("cs", "memcheck", "t.py", Path("/ws"))  # so single_run's default holds
    assert "small run" not in skill_text() and f"seed {DEFAULT_SEED}" in skill_text()
