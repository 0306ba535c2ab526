"""File names: the rule the file tools apply, names made some other way (the shell) listed escaped
and flagged, and delete_file / rename_file undoing them by the name list_files shows."""

from __future__ import annotations

import os

import pytest

from cuda_agent.filenames import name_problem, shown
from cuda_agent.settings import ToolSettings
from cuda_agent.tools.files import DeleteFile, EditFile, ListFiles, RenameFile, ViewFile
from cuda_agent.tools.registry import default_tools, dispatch

view, edit, ls, delete, rename = ViewFile(), EditFile(), ListFiles(), DeleteFile(), RenameFile()


def make(ws, raw: bytes, data: bytes = b"// made by the shell\n") -> None:
    """A file created below the str level, as a shell would (any bytes but '/' and NUL)."""
    with open(os.path.join(os.fsencode(ws.root), raw), "wb") as f:
        f.write(data)


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


# ---- the rule ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "kernels/add.cu",
        "model_new.py",
        "kernels/sub/x-1.cuh",
        "notes.txt",
        ".gitignore",
        ".cuda-agent/workspace.json",
        "a.b.c",
        "K_2.cu",
    ],
)
def test_plain_names_pass(path):
    assert name_problem(path) is None


@pytest.mark.parametrize(
    "path, says",
    [
        ("kernels/a,b.cu", "','"),
        ("kernels/a b.cu", "a space"),
        ("kernels/a\nb.cu", "\\n"),
        ("kernels/a;b.cu", "';'"),
        ("kernels/a\\b.cu", "'\\\\'"),
        ("kernels/é.cu", "é"),
        ("kernels/\udcff.cu", "\\xff"),
        ("kernels/\ud800.cu", "\\ud800"),
        ("kernels/.hidden.cu", "starts with '.'"),
        ("kernels/.gitignore", "starts with '.'"),
        ("kernels/-x.cu", "starts with '-'"),
        ("kernels//a.cu", "empty"),
        ("kernels/", "empty"),
        ("./kernels/a.cu", "'.'"),
        ("../a.cu", "'..'"),
        ("/etc/passwd", "absolute"),
        (".git/config", ".git"),
        ("", "empty"),
        ("k" * 101 + ".cu", "at most 100"),
        ("/".join(["abcdefghij"] * 25), "at most 240"),
    ],
)
def test_other_names_are_refused_in_one_line_saying_what_to_do(ctx, ws, path, says):
    assert says in name_problem(path)
    for r in (edit.run({"mode": "create", "path": path, "file_text": "x\n"}, ctx), view.run({"path": path}, ctx)):
        assert r.status == "error" and says in r.observation, r.observation
        assert "letters, digits" in r.observation and "\n" not in r.observation and encodable(r.observation)
    assert not any("a,b" in p or "a b" in p for p in os.listdir(ws.root / "kernels"))


def test_a_lone_surrogate_from_the_models_json_is_an_error_not_a_crash(ctx):
    tools = default_tools(ToolSettings())
    r = dispatch(tools, "edit_file", '{"mode": "create", "path": "kernels/\\ud800.cu", "file_text": "x"}', ctx)
    assert r.status == "error" and "\\ud800" in r.observation and encodable(r.observation)
    r = dispatch(tools, "view_file", '{"path": "\\udcff"}', ctx)
    assert r.status == "error" and encodable(r.observation)


def test_viewing_a_bad_name_that_exists_says_how_to_fix_it(ctx, ws):
    make(ws, b"kernels/a,b.cu")
    r = view.run({"path": "kernels/a,b.cu"}, ctx)
    assert r.status == "error" and "rename_file" in r.observation and "delete_file" in r.observation


# ---- list_files: escaped and flagged -------------------------------------------------------------


def test_list_shows_odd_names_escaped_and_flagged(ctx, ws):
    for raw in (b"kernels/a,b.cu", b"kernels/new\nline.cu", b"kernels/byte\xff.cu", b"kernels/sp ace.cu"):
        make(ws, raw)
    os.symlink(os.fsdecode(b"/nowhere/\xfe"), os.path.join(os.fsencode(ws.root), b"kernels/link\xfe"))
    r = ls.run({}, ctx)
    assert r.status == "ok" and encodable(r.observation)
    rows = r.observation.splitlines()
    for name in ("a,b.cu", "new\\nline.cu", "byte\\xff.cu", "sp ace.cu"):
        row = next(x for x in rows if x.strip().startswith(name))
        assert "not allowed" in row, row
    assert any(x.strip().startswith("link\\xfe -> /nowhere/\\xfe") for x in rows)
    assert "    add.cu  " in r.observation and not any("add.cu" in x and "not allowed" in x for x in rows)
    assert "rename_file or delete_file" in r.observation
    assert ls.run({"path": "kernels"}, ctx).observation.count("not allowed") == 6  # 5 rows + the note


def test_a_root_level_gitignore_is_not_flagged_but_a_nested_one_is(ctx, ws):
    (ws.root / ".gitignore").write_text("build/\n")
    (ws.root / "kernels" / ".gitignore").write_text("*\n")
    rows = ls.run({}, ctx).observation.splitlines()
    assert "not allowed" not in next(x for x in rows if x.strip().startswith(".gitignore") and x.startswith("  .g"))
    assert "not allowed" in next(x for x in rows if x.startswith("    .gitignore"))


# ---- delete_file -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"kernels/a,b.cu",
        b"kernels/new\nline.cu",
        b"kernels/byte\xff.cu",
        b"kernels/sp ace.cu",
        b"kernels/.hidden.cu",
        b"kernels/back\\slash.cu",
        b"kernels/-dash.cu",
        b"kernels/trailing.cu ",
        b" lead",
    ],
)
def test_delete_takes_any_name_as_list_files_shows_it(ctx, ws, raw):
    make(ws, raw)
    name = shown(os.fsdecode(raw))
    assert name.split("/")[-1] in ls.run({}, ctx).observation
    r = delete.run({"path": name}, ctx)
    assert r.status == "ok" and r.observation == f"deleted {name}" and encodable(r.observation)
    assert not os.path.lexists(os.path.join(os.fsencode(ws.root), raw))
    assert (ws.root / "kernels" / "add.cu").exists()


def test_delete_plain_files_folders_and_links_never_their_targets(ctx, ws, tmp_path):
    assert delete.run({"path": "kernels/add.cu"}, ctx).observation == "deleted kernels/add.cu"
    (ws.root / "kernels" / "sub" / "deep").mkdir(parents=True)
    (ws.root / "kernels" / "sub" / "deep" / "x.cu").write_text("x")
    (ws.root / "kernels" / "sub" / "y.cu").write_text("y")
    r = delete.run({"path": "kernels/sub/"}, ctx)
    assert r.status == "ok" and "(2 files)" in r.observation and not (ws.root / "kernels" / "sub").exists()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    os.symlink(outside, ws.root / "kernels" / "out.cu")
    os.symlink(tmp_path, ws.root / "dir_link")
    assert delete.run({"path": "kernels/out.cu"}, ctx).status == "ok"
    assert delete.run({"path": "dir_link"}, ctx).status == "ok"
    assert outside.read_text() == "keep me" and not os.path.lexists(ws.root / "dir_link")
    os.symlink(tmp_path, ws.root / "dir_link")
    r = delete.run({"path": "dir_link/outside.txt"}, ctx)  # never through a link
    assert r.status == "error" and "not a folder" in r.observation and outside.exists()


def test_delete_refuses_protected_git_and_missing(ctx, ws):
    (ws.root / ".cuda-agent").mkdir()
    (ws.root / ".cuda-agent" / "workspace.json").write_text("{}")
    for path, says in [
        ("model.py", "protected"),
        (".git", ".git"),
        (".git/config", ".git"),
        (".cuda-agent", "protected"),
        (".cuda-agent/workspace.json", "protected"),
        ("nope.cu", "does not exist"),
        ("kernels/../model.py", "'..'"),
        ("", "give the path"),
        (".", "give the path"),
        ("/etc/passwd", "absolute"),
    ]:
        r = delete.run({"path": path}, ctx)
        assert r.status == "error" and says in r.observation and "\n" not in r.observation, (path, r.observation)
    assert (ws.root / "model.py").exists() and (ws.root / ".git" / "config").exists()
    assert (ws.root / ".cuda-agent" / "workspace.json").exists()


# ---- rename_file -----------------------------------------------------------------------------


def test_rename_fixes_a_bad_name_and_keeps_the_content(ctx, ws):
    make(ws, b"kernels/a,b\xff.cu", b"// my kernel\n")
    r = rename.run({"path": "kernels/a,b\\xff.cu", "new_path": "kernels/a_b.cu"}, ctx)
    assert r.status == "ok" and r.observation == "renamed kernels/a,b\\xff.cu to kernels/a_b.cu"
    assert (ws.root / "kernels" / "a_b.cu").read_text() == "// my kernel\n"
    assert "not allowed" not in ls.run({}, ctx).observation


def test_rename_moves_files_and_folders_into_new_folders(ctx, ws):
    assert rename.run({"path": "kernels/add.cu", "new_path": "kernels/ops/add2.cu"}, ctx).status == "ok"
    assert (ws.root / "kernels" / "ops" / "add2.cu").exists() and not (ws.root / "kernels" / "add.cu").exists()
    assert rename.run({"path": "kernels/ops", "new_path": "old_ops"}, ctx).status == "ok"
    assert (ws.root / "old_ops" / "add2.cu").exists()


def test_rename_refusals(ctx, ws):
    (ws.root / "kernels" / "b.cu").write_text("b")
    for args, says in [
        ({"path": "kernels/add.cu", "new_path": "kernels/b.cu"}, "already exists"),
        ({"path": "kernels/add.cu", "new_path": "kernels/a,b.cu"}, "','"),
        ({"path": "kernels/add.cu", "new_path": "../add.cu"}, "'..'"),
        ({"path": "kernels/add.cu", "new_path": ".git/add.cu"}, ".git"),
        ({"path": "kernels/add.cu", "new_path": "model.py"}, "protected"),
        ({"path": "model.py", "new_path": "model2.py"}, "protected"),
        ({"path": "kernels", "new_path": "kernels/inner"}, "into itself"),
        ({"path": "nope.cu", "new_path": "x.cu"}, "does not exist"),
    ]:
        r = rename.run(args, ctx)
        assert r.status == "error" and says in r.observation and "\n" not in r.observation, (args, r.observation)
    assert (ws.root / "kernels" / "add.cu").read_text().startswith("extern") and (ws.root / "model.py").exists()


def test_the_new_tools_are_offered_with_the_file_tools():
    names = [t.name for t in default_tools(ToolSettings())]
    assert names[:5] == ["view_file", "edit_file", "list_files", "delete_file", "rename_file"]
