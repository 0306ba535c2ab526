"""Checks that keep cuda_agent/skills/SKILL.md true: the tools, guard ids and statuses it names
exist, and its complete example builds with the harness's nvcc flags, binds, passes the static
guards and runs a forward (on CPU, with stub launchers) that dispatches no torch compute. The
workspace template is checked too. On the GPU machine the example is also evaluated end to end
(marked `gpu`)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import typing
from pathlib import Path

import pytest

from cuda_agent.eval.guards import check_candidate_static
from cuda_agent.eval.verdict import Status
from cuda_agent.kernels.launchers import parse_source

ROOT = Path(__file__).resolve().parents[1]
SKILL = ROOT / "cuda_agent" / "skills" / "SKILL.md"
TEMPLATE = ROOT / "cuda_agent" / "workspace_template"
GUARDS_DOC = ROOT / "docs" / "guards.md"

# The model's tools (issue 3): the only tool names SKILL.md may mention.
TOOLS = frozenset(
    {
        "view_file",
        "edit_file",
        "list_files",
        "delete_file",
        "rename_file",
        "compile",
        "verify",
        "benchmark",
        "profile",
        "sanitize",
        "shell",
        "finish",
    }
)
STATUSES = frozenset(typing.get_args(Status))
# Other snake_case words SKILL.md puts in backticks (outside code blocks). A new one must be added
# here on purpose, so an invented tool or guard name can't slip in unnoticed.
OTHER_WORDS = frozenset(
    {
        "best",
        "forward",
        "self",
        "stream",
        "fail",
        "warn",
        "state_dict",
        "get_inputs",
        "kernel_runtime",
        "model",
        "torch",
        "math",
        "typing",
        "ast",
        "view",
        "permute",
        "t",
        "unsqueeze",
        "narrow",
        "global",
        "nonlocal",
        "try",
        "except",
        "lru_cache",
        "setattr",
        "open",
        "exec",
        "eval",
        "globals",
        "save",
        "popen",
        "fopen",
        "getenv",
        "dlopen",
        "dlsym",
        "system",
        "fork",
        "half",
        "float",
        "double",
        "bool",
        "int",
        "long",
        "size_t",
        "int64_t",
        "int32",
        "float4",
        "void",
        "static",
        "sm_90a",
        "expf",
        "erff",
        "rsqrtf",
        "reinterpret_cast",
    }
)
NVCC_FLAGS = ["-O3", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", "-Xcompiler", "-fPIC", "-shared"]

_FENCE = re.compile(r"^```.*?$\n(.*?)^```[ \t]*$", re.M | re.S)
_FILE_HEADER = re.compile(r"^`([\w./-]+\.(?:py|cu|cuh|h))`:?\s*$")


def skill_text() -> str:
    return SKILL.read_text()


def prose(text: str) -> str:
    """SKILL.md without its fenced code blocks."""
    return _FENCE.sub("", text)


def example_files(text: str) -> dict[str, str]:
    """Fenced blocks whose preceding line is a file-name header such as `model_new.py`:"""
    files = {}
    for m in _FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        header = _FILE_HEADER.match(before.strip())
        if header:
            files[header.group(1)] = m.group(1)
    return files


def backticked_words(text: str) -> set[str]:
    """Lower-case identifiers in inline code spans (`verify`, `aten_in_forward`): where a tool,
    guard or status name would appear. C and Python names in other spellings are left alone."""
    return set(re.findall(r"`([a-z][a-z0-9_]*)`", prose(text)))


def documented_guards() -> set[str]:
    """Guard ids from the first column of docs/guards.md's table."""
    return set(re.findall(r"^\|\s*`([a-z_]+)`\s*\|", GUARDS_DOC.read_text(), re.M))


def named_guards(text: str) -> set[str]:
    """Guard ids SKILL.md names: the "- `id`:" bullets of its forbidden section. (Any other
    backticked word must be known too: see test_every_backticked_word_is_known.)"""
    section = prose(text).split("## 6.", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `([a-z_]+)`:", section, re.M))


# -- tools and guard ids ---------------------------------------------------------------------------


def test_skill_is_short_enough_to_read():
    # the system prompt no longer embeds it: the model reads it by section (view_file, line ranges)
    lines = skill_text().splitlines()
    assert 150 <= len(lines) <= 440, len(lines)


def test_tools_section_lists_exactly_the_tools():
    text = skill_text()
    section = text.split("## 3. Tools", 1)[1].split("\n## ", 1)[0]
    listed = {
        w
        for line in section.splitlines()
        if line.startswith("- ")
        for w in re.findall(r"`([a-z_]+)`", line.split(":", 1)[0])
    }
    assert listed == TOOLS


def test_every_backticked_word_is_known():
    text = skill_text()
    known = TOOLS | documented_guards() | STATUSES | OTHER_WORDS
    unknown = sorted(w for w in backticked_words(text) if w not in known)
    assert not unknown, (
        f"SKILL.md names {unknown}: a tool, guard or status that does not exist? "
        "(if it is neither, add it to OTHER_WORDS)"
    )


def test_named_guard_ids_exist_in_docs():
    guards = named_guards(skill_text())
    assert guards, "the forbidden section lists no guard ids"
    documented = documented_guards()
    assert len(documented) >= 10, "could not read the guard table of docs/guards.md"
    missing = sorted(guards - documented)
    assert not missing, f"SKILL.md names guards that docs/guards.md lacks: {missing}"


def test_statuses_named_exist():
    text = prose(skill_text())
    section = text.split("**Verdict.**", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`([a-z_]+)`", section.split(")", 1)[0]))
    assert named and named <= STATUSES, named - STATUSES


# -- the complete example --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example() -> dict[str, str]:
    files = example_files(skill_text())
    assert set(files) == {"model.py", "model_new.py", "kernels/scale_add_relu.cu"}, sorted(files)
    return files


@pytest.fixture
def candidate(tmp_path, example) -> Path:
    root = tmp_path / "candidate"
    for name, body in example.items():
        if name != "model.py":
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(body)
    (tmp_path / "model.py").write_text(example["model.py"])
    return root


def test_example_python_parses(example):
    for name in ("model.py", "model_new.py"):
        ast.parse(example[name], filename=name)


def test_example_init_signature_matches_model(example):
    def init_args(source: str, cls: str) -> list[str]:
        tree = ast.parse(source)
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
        init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        return [a.arg for a in init.args.args]

    assert init_args(example["model_new.py"], "ModelNew") == init_args(example["model.py"], "Model")


def test_example_launcher_parses_and_matches_the_call(example):
    found = parse_source(example["kernels/scale_add_relu.cu"].encode(), "kernels/scale_add_relu.cu")
    assert not found.problems and not found.warnings, (found.problems, found.warnings)
    assert [launcher.name for launcher in found.launchers] == ["scale_add_relu"]
    params = found.launchers[0].params
    assert params[-1].kind == "stream"
    assert set(found.kernels) == {"scale_add_relu_vec4", "scale_add_relu_scalar"}
    # model_new.py passes every parameter before the stream, positionally
    call = next(
        n
        for n in ast.walk(ast.parse(example["model_new.py"]))
        if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "scale_add_relu"
    )
    assert len(call.args) == len(params) - 1 and not call.keywords


def test_example_passes_the_static_guards(candidate):
    findings = check_candidate_static(candidate, task_fp32=True)
    assert not [f for f in findings if f.severity == "fail"], findings
    assert not findings, findings  # the example should not even draw a warning


def test_example_forward_dispatches_no_torch_compute(example, monkeypatch):
    """Run the example's forward on CPU with a stub launcher table, recording ATen ops as the
    worker does: only allocation, views and metadata may show (aten_in_forward)."""
    import sys
    import types

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from cuda_agent.eval.dynamic_guards import aten_findings

    spec = parse_source(example["kernels/scale_add_relu.cu"].encode(), "kernels/scale_add_relu.cu")
    calls = []

    class Stub:
        def __getattr__(self, name):
            launcher = next(lau for lau in spec.launchers if lau.name == name)

            def call(*args):
                assert len(args) == len(launcher.params) - 1, (name, args)
                calls.append(name)

            return call

    runtime = types.ModuleType("kernel_runtime")
    runtime.load_kernels = Stub
    monkeypatch.setitem(sys.modules, "kernel_runtime", runtime)
    scope: dict = {}
    exec(compile(example["model.py"], "model.py", "exec"), scope)
    new_scope: dict = {}
    exec(compile(example["model_new.py"], "model_new.py", "exec"), new_scope)
    init = scope["get_init_inputs"]()
    model, model_new = scope["Model"](*init), new_scope["ModelNew"](*init)
    model_new.load_state_dict(model.state_dict(), strict=True)  # what the worker does
    x, y = torch.randn(7, 5), torch.randn(7, 5)  # small stand-ins for get_inputs()

    ops = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Recorder():
        out = model_new(x, y)
    assert calls == ["scale_add_relu"]
    assert not aten_findings(ops), ops
    assert type(out) is torch.Tensor and out.shape == model(x, y).shape and out.is_contiguous()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_example_kernel_compiles_with_the_harness_flags(candidate, tmp_path):
    proc = subprocess.run(
        ["nvcc", *NVCC_FLAGS, "kernels/scale_add_relu.cu", "-o", str(tmp_path / "libx.so")],
        cwd=candidate,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ours = [line for line in (proc.stdout + proc.stderr).splitlines() if "scale_add_relu.cu" in line]
    assert not [line for line in ours if "warning" in line.lower()], ours


@pytest.mark.gpu
@pytest.mark.slow
def test_example_is_correct_on_the_gpu(candidate, tmp_path):
    from cuda_agent.eval.evaluator import Evaluator
    from cuda_agent.eval.settings import EvalConfig
    from cuda_agent.eval.timing import TimingConfig
    from cuda_agent.task import load_task

    cfg = EvalConfig(
        cache_dir=tmp_path / "cache",
        baselines=["eager"],
        timing=TimingConfig(warmup_ms=10, min_batches=2, max_batches=3, budget_ms=300),
    )
    with Evaluator(load_task(str(candidate.parent / "model.py")), cfg, ahead="none") as ev:
        v = ev.evaluate(candidate)
    assert v.status == "correct" and v.reward >= 2, (v.status, v.error, [f.message for f in v.findings])


# -- the workspace template ------------------------------------------------------------------------


def test_template_model_new_is_valid_python_and_guard_clean():
    source = (TEMPLATE / "model_new.py").read_text()
    tree = ast.parse(source, filename="model_new.py")
    assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
    assert "TODO" not in source
    findings = check_candidate_static(TEMPLATE, task_fp32=True)
    assert not [f for f in findings if f.severity == "fail"], findings


def test_template_has_its_files_and_no_skill_copy():
    assert (TEMPLATE / "kernels" / "README.md").is_file()
    ignored = (TEMPLATE / ".gitignore").read_text().split()
    for pattern in ("build/", "__pycache__/", "*.so", "*.o", ".cache/"):
        assert pattern in ignored, pattern
    assert not (TEMPLATE / "SKILL.md").exists()  # the workspace copies cuda_agent/skills/SKILL.md
