"""The tool list, its schemas, and dispatch by name (which never raises)."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel

from cuda_agent.settings import ToolSettings  # noqa: E402
from cuda_agent.tools import registry
from cuda_agent.tools.base import Tool, ToolContext
from cuda_agent.tools.registry import default_tools, dispatch, schemas


def names(tools):
    return [t.name for t in tools]


def test_default_tools_shell_only_when_allowed():
    base = names(default_tools(ToolSettings()))
    assert {"view_file", "edit_file", "list_files", "finish"} <= set(base) and "shell" not in base
    assert base[-1] == "finish"
    assert "shell" in names(default_tools(ToolSettings(allow_shell=True)))


def test_a_new_module_is_all_it_takes(monkeypatch, tmp_path):
    (tmp_path / "extra_tools_for_test.py").write_text(
        "from pydantic import BaseModel\n"
        "from cuda_agent.tools.base import Tool, ToolResult\n"  # an imported Tool is not offered
        "class Ping(Tool):\n"
        "    name, description = 'ping', 'answers pong'\n"
        "    class Args(BaseModel):\n"
        "        pass\n"
        "    def execute(self, args, ctx):\n"
        "        return ToolResult(observation='pong')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "TOOL_MODULES", (*registry.TOOL_MODULES, "extra_tools_for_test"))
    tools = default_tools(ToolSettings())
    assert names(tools)[-1] == "ping" and names(tools).count("ping") == 1
    assert dispatch(tools, "ping", {}, None).observation == "pong"


def test_schemas_are_valid_function_definitions():
    try:  # the meta-schema check needs jsonschema (not a dependency); the structure is checked anyway
        import jsonschema
    except ImportError:
        jsonschema = None
    tools = default_tools(ToolSettings(allow_shell=True))
    for s in schemas(tools):
        assert s["type"] == "function"
        fn = s["function"]
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", fn["name"]) and fn["description"]
        params = fn["parameters"]
        if jsonschema:
            jsonschema.Draft202012Validator.check_schema(params)
        assert params["type"] == "object"
        assert set(params.get("required", [])) <= set(params["properties"])
        for prop in params["properties"].values():
            assert prop.get("description") or prop.get("enum"), (fn["name"], prop)
    by_name = {s["function"]["name"]: s["function"]["parameters"] for s in schemas(tools)}
    assert by_name["edit_file"]["required"] == ["mode", "path"]
    assert by_name["view_file"]["required"] == ["path"]
    assert by_name["finish"]["required"] == ["summary"]
    assert by_name["shell"]["required"] == ["command"]


def test_schema_accepts_what_the_tool_accepts():
    jsonschema = pytest.importorskip("jsonschema")
    tools = {t.name: t for t in default_tools(ToolSettings())}
    validator = jsonschema.Draft202012Validator(tools["edit_file"].schema()["function"]["parameters"])
    assert validator.is_valid({"mode": "insert", "path": "a.cu", "insert_line": 0, "new_str": "x"})
    assert not validator.is_valid({"mode": "insert"})
    assert not validator.is_valid({"mode": "rename", "path": "a.cu"})


def test_dispatch_runs_a_tool(ctx):
    tools = default_tools(ToolSettings())
    r = dispatch(tools, "view_file", '{"path": "model_new.py"}', ctx)
    assert r.status == "ok" and "def forward" in r.observation
    r = dispatch(tools, "finish", {"summary": "done: 2x faster"}, ctx)
    assert r.data == {"finished": True, "summary": "done: 2x faster"}


@pytest.mark.parametrize(
    "name,args,says",
    [
        ("rm_rf", {}, "no tool named 'rm_rf'; the tools are: view_file, edit_file, list_files"),
        ("view_file", {}, "path: Field required"),
        ("view_file", {"path": 3}, "path: Input should be a valid string"),
        ("view_file", "{not json", "not valid JSON"),
        ("view_file", "[1, 2]", "must be a JSON object"),
        ("finish", {"summary": ""}, "summary"),
        ("shell", {"command": "ls"}, "no tool named 'shell'"),
    ],
)
def test_dispatch_errors_are_results(ctx, name, args, says):
    r = dispatch(default_tools(ToolSettings()), name, args, ctx)
    assert r.status == "error" and says in r.observation


def test_dispatch_survives_a_crashing_tool(ws):
    class Boom(Tool):
        name, description = "boom", "crashes"

        class Args(BaseModel):
            pass

        def execute(self, args, ctx):
            raise RuntimeError("disk on fire")

    r = dispatch([Boom()], "boom", None, ToolContext(workspace=ws))
    assert r.status == "error" and "RuntimeError: disk on fire" in r.observation and r.data["internal_error"]
