"""The written interfaces (agent/interfaces.py): every model class defines every member of the Model
protocol with the protocol's parameters, the Environment every member of AgentEnvironment, nothing in
agent/ probes a model or environment for a member, and the model kinds' registry (model_kinds.py)."""

from __future__ import annotations

import ast
import inspect
import json
import sys
from pathlib import Path

import pytest
from test_loop import (
    Failing,
    env,  # noqa: F401 (a fixture)
)

from cuda_agent.agent.interfaces import WINDOW_SOURCES, AgentEnvironment, Model
from cuda_agent.agent.litellm_model import LitellmModel
from cuda_agent.agent.scripted_model import ScriptedModel
from cuda_agent.environment import Environment
from cuda_agent.mcp_server.bridge import ClientBridge
from cuda_agent.model_kinds import MODEL_KINDS, ModelKind, ModelKindError, make_model
from cuda_agent.run import RunError
from cuda_agent.run import make_model as run_make_model
from cuda_agent.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
# every model class and how to make one; a new class with a `query` method must be added here
MODELS = {
    "cuda_agent/agent/scripted_model.py:ScriptedModel": lambda: ScriptedModel([]),
    "cuda_agent/agent/litellm_model.py:LitellmModel": lambda: LitellmModel("openai/gpt-x"),
    "cuda_agent/mcp_server/bridge.py:ClientBridge": lambda: ClientBridge(),
    "tests/agent/test_loop.py:Failing": lambda: Failing(RuntimeError("x")),
}


def members(protocol: type) -> tuple[set[str], dict[str, inspect.Signature]]:
    """(attributes and properties, methods with their signatures) a protocol declares."""
    attributes = set(protocol.__dict__.get("__annotations__", {}))
    methods = {}
    for name, value in vars(protocol).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property):
            attributes.add(name)
        elif inspect.isfunction(value):
            methods[name] = inspect.signature(value)
    return attributes, methods


def missing(obj: object, protocol: type) -> list[str]:
    """What `obj` lacks of `protocol`: members not defined (on its class or set on it) and methods whose
    parameters differ. Looked up without evaluating a property (LitellmModel's would load litellm)."""
    attributes, methods = members(protocol)
    cls, problems = type(obj), []
    for name in sorted(attributes):
        if name not in vars(obj) and not any(name in vars(c) for c in cls.__mro__):
            problems.append(f"{name} is not defined")
    for name, wanted in sorted(methods.items()):
        own = inspect.getattr_static(obj, name, None)
        if not inspect.isfunction(own):
            problems.append(f"{name}() is not a method")
        elif list(inspect.signature(own).parameters) != list(wanted.parameters):
            problems.append(f"{name}{inspect.signature(own)} is not {name}{wanted}")
    return problems


def test_the_protocols_list_what_the_loop_uses():
    """A check of `members` itself, and of the lists: every member the brief of the interfaces named."""
    attributes, methods = members(Model)
    assert attributes == {"name", "deadline", "native_tools", "max_tokens", "window_source"}
    assert set(methods) == {
        "query",
        "context_window",
        "count_tokens",
        "resolved",
        "client_config",
        "secret_values",
        "check_key",
    }
    attributes, methods = members(AgentEnvironment)
    assert attributes == {"workspace", "eval_config", "tool_settings", "tools"}
    assert set(methods) == {"tool_schemas", "step", "reference_task", "add_secrets"}


def test_missing_names_what_a_partial_model_lacks():
    class Partial:
        name = "partial"

        def query(self, messages):  # a parameter short
            raise NotImplementedError

        def context_window(self):
            return None

    problems = missing(Partial(), Model)
    short = "query(self, messages) is not query(self, messages: 'list[dict]', tools:"
    assert any(p.startswith(short) for p in problems)
    assert "deadline is not defined" in problems and "count_tokens() is not a method" in problems
    assert not any(p.startswith(("name ", "context_window")) for p in problems)


def model_classes() -> dict[str, list[str]]:
    """'path:Class' -> its bases' names, for every class in the package and the tests with a `query` method."""
    found = {}
    for path in sorted([*(ROOT / "cuda_agent").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(f, ast.FunctionDef) and f.name == "query" for f in node.body
            ):
                found[f"{path.relative_to(ROOT)}:{node.name}"] = [ast.unparse(b).split(".")[-1] for b in node.bases]
    return found


def test_every_model_class_is_checked_here():
    """A model class is in MODELS, or inherits the protocol from one that is (a test's ScriptedModel)."""
    checked = {key.split(":")[1] for key in MODELS}
    found = model_classes()
    assert set(MODELS) <= set(found)  # the list itself is not stale
    unchecked = [
        key
        for key, bases in found.items()
        if key not in MODELS
        and not set(bases) & checked
        and "Protocol" not in bases
        and not key.startswith(f"{Path(__file__).relative_to(ROOT)}:")
    ]
    # (this file's partial model lacks members on purpose)
    assert not unchecked, f"model classes to add to MODELS: {unchecked}"


@pytest.mark.parametrize("key", sorted(MODELS))
def test_every_model_class_defines_the_whole_protocol(key):
    model = MODELS[key]()
    assert missing(model, Model) == [], key


@pytest.mark.parametrize(
    "key",
    [
        "cuda_agent/agent/scripted_model.py:ScriptedModel",
        "cuda_agent/mcp_server/bridge.py:ClientBridge",
        "tests/agent/test_loop.py:Failing",
    ],
)
def test_the_neutral_values_follow_the_protocols_conventions(key):
    """Models with no tokenizer, window, key or settings answer as the protocol's docstring says."""
    model = MODELS[key]()
    messages = [{"role": "user", "content": "hello"}]
    assert model.count_tokens(messages) is None and model.context_window() is None
    assert model.window_source == "unknown" and model.max_tokens is None and model.deadline is None
    assert model.resolved() == {} and model.client_config() == {} and model.secret_values() == []
    assert model.check_key() is None and isinstance(model.native_tools, bool)


def test_the_litellm_model_answers_without_loading_litellm(monkeypatch):
    monkeypatch.setitem(sys.modules, "litellm", None)  # `import litellm` now fails, as on a GPU machine
    model = LitellmModel(
        "openai/gpt-x", api_base="http://localhost:9/v1", max_output_tokens=300, context_tokens=8192, tools="text"
    )
    assert (model.max_tokens, model.context_window(), model.window_source) == (300, 8192, "context_tokens")
    assert model.window_source in WINDOW_SOURCES and model.native_tools is False
    assert model.count_tokens([{"role": "user", "content": "hi"}]) is None  # no litellm: the estimate
    assert model.client_config()["max_output_tokens"] == 300 and model.secret_values() == []
    json.dumps(model.client_config())  # what the header records


def test_the_environment_defines_the_whole_protocol(env):  # noqa: F811
    assert isinstance(env, Environment) and missing(env, AgentEnvironment) == []


PROBES = ("model", "env", "self.model", "self.env", "holder", "own")


def test_nothing_probes_a_model_or_an_environment_for_a_member():
    """getattr/hasattr on the loop's partners would hide a member a class forgot (third-party objects'
    probing, a litellm response's, is fine)."""
    files = [*sorted((ROOT / "cuda_agent" / "agent").glob("*.py")), ROOT / "cuda_agent" / "secrets.py"]
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.args
                and node.func.id in ("getattr", "hasattr")
                and ast.unparse(node.args[0]) in PROBES
            ):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, found


def script_file(tmp_path: Path, n: int = 3) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([f"turn {i}" for i in range(n)]))
    return path


def test_a_run_without_a_kind_gets_the_scripted_model_for_a_script_else_litellm(tmp_path, monkeypatch):
    scripted = make_model(Settings(), script_file(tmp_path), skip=2)
    assert isinstance(scripted, ScriptedModel) and [r.content for r in scripted.responses] == ["turn 2"]
    monkeypatch.setitem(sys.modules, "litellm", None)  # making a litellm model never imports litellm
    llm = make_model(Settings(model="openai/gpt-x", api_base="http://localhost:9/v1"))
    assert isinstance(llm, LitellmModel) and llm.name == "openai/gpt-x" and llm.config.api_base.endswith(":9/v1")


def test_an_unknown_kind_is_one_line_naming_the_known_ones(tmp_path):
    with pytest.raises(ModelKindError) as e:
        make_model(Settings(model="openai/gpt-x"), kind="vllm")
    said = str(e.value)
    assert "\n" not in said and "'vllm'" in said and all(k in said for k in MODEL_KINDS)
    with pytest.raises(RunError, match="unknown model kind 'Scripted': use one of scripted, litellm"):
        run_make_model(Settings(), script_file(tmp_path), kind="Scripted")  # names are exact


def test_a_kind_without_what_it_needs_says_what_to_give(tmp_path):
    with pytest.raises(RunError, match="no model: pass --model"):
        run_make_model(Settings(), None)
    with pytest.raises(RunError, match="needs a script: pass --script"):
        run_make_model(Settings(model="openai/gpt-x"), None, kind="scripted")
    llm = run_make_model(Settings(model="openai/gpt-x"), script_file(tmp_path), kind="litellm")  # named: it wins
    assert isinstance(llm, LitellmModel)


def test_adding_a_kind_is_one_entry(tmp_path, monkeypatch):
    echo = ModelKind(
        lambda settings, script, skip: ScriptedModel([], name=f"echo:{settings.model}"),
        default_for=lambda settings, script: False,
    )
    monkeypatch.setitem(MODEL_KINDS, "echo", echo)
    assert make_model(Settings(model="m"), kind="echo").name == "echo:m"
    assert isinstance(make_model(Settings(model="m")), LitellmModel)  # not a default: the others still are
    with pytest.raises(ModelKindError, match="use one of scripted, litellm, echo"):
        make_model(Settings(), kind="nope")
