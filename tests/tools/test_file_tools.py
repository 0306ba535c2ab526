"""view_file, edit_file and list_files on real files in a temporary workspace."""

from __future__ import annotations

import os

import pytest

from cuda_agent.tools.base import MAX_OBSERVATION
from cuda_agent.tools.files import EditFile, ListFiles, ViewFile

view, edit, ls = ViewFile(), EditFile(), ListFiles()


# ---- view_file ------------------------------------------------------------------------------


def test_view_numbers_lines(ctx):
    r = view.run({"path": "model_new.py"}, ctx)
    assert r.status == "ok"
    assert "lines 1-5 of 5" in r.observation
    assert "   4| def forward(x):" in r.observation
    assert r.data["total_lines"] == 5


def test_view_range(ctx):
    r = view.run({"path": "model_new.py", "start_line": 4, "end_line": 5}, ctx)
    assert r.observation.splitlines()[1:] == ["   4| def forward(x):", "   5|     return x"]


def test_view_huge_file_is_cut_at_a_line_and_says_how_to_see_more(ctx, ws):
    (ws.root / "big.txt").write_text("".join(f"line {i} " + "x" * 60 + "\n" for i in range(1, 100_001)))
    r = view.run({"path": "big.txt"}, ctx)
    assert len(r.observation) <= MAX_OBSERVATION
    assert "of 100000" in r.observation
    last = r.data["end_line"]
    assert 10 < last < 100_000
    assert f"view_file with start_line={last + 1}" in r.observation
    assert "characters cut" not in r.observation  # cut by whole lines, not in the middle of one


def test_view_long_line_is_shortened(ctx, ws):
    (ws.root / "min.js").write_text("a" * 50_000 + "\n")
    r = view.run({"path": "min.js"}, ctx)
    assert "more characters]" in r.observation and len(r.observation) < 1000


def test_view_refuses_binary_and_folders_and_missing(ctx, ws):
    (ws.root / "k.so").write_bytes(b"\x7fELF\x00\x01\x02")
    assert "binary" in view.run({"path": "k.so"}, ctx).observation
    r = view.run({"path": "kernels"}, ctx)
    assert r.status == "error" and "folder" in r.observation and "list_files" in r.observation
    r = view.run({"path": "nope.py"}, ctx)
    assert r.status == "error" and "does not exist" in r.observation


def test_view_past_the_end(ctx):
    r = view.run({"path": "model_new.py", "start_line": 99}, ctx)
    assert r.status == "error" and "has 5 lines" in r.observation


# ---- escapes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["../outside.txt", "kernels/../../outside.txt", "/etc/passwd", ".git/config", "link_out", "link_dir/secret.txt"],
)
def test_escapes_refused_for_every_tool(ctx, ws, tmp_path, path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (tmp_path / "outside.txt").write_text("secret\n")
    os.symlink(outside / "secret.txt", ws.root / "link_out")
    os.symlink(outside, ws.root / "link_dir")
    for r in (
        view.run({"path": path}, ctx),
        edit.run({"mode": "create", "path": path, "file_text": "x", "overwrite": True}, ctx),
        edit.run({"mode": "replace", "path": path, "old_str": "secret", "new_str": "x"}, ctx),
    ):
        assert r.status == "error", r.observation
        assert "secret" not in r.observation.replace("secret.txt", "")
    assert (outside / "secret.txt").read_text() == "secret\n"
    assert (tmp_path / "outside.txt").read_text() == "secret\n"
    assert (ws.root / ".git" / "config").read_text() == "[core]\n"
    assert ls.run({"path": ".git"}, ctx).status == "error"
    assert ls.run({"path": "link_dir"}, ctx).status == "error"


def test_protected_file_readable_not_writable(ctx, ws):
    before = (ws.root / "model.py").read_text()
    assert view.run({"path": "model.py"}, ctx).status == "ok"
    r = edit.run({"mode": "replace", "path": "model.py", "old_str": "pass", "new_str": "x = 1"}, ctx)
    assert r.status == "error" and "protected" in r.observation
    r = edit.run({"mode": "create", "path": "model.py", "file_text": "", "overwrite": True}, ctx)
    assert r.status == "error"
    assert (ws.root / "model.py").read_text() == before


# ---- edit_file: replace ---------------------------------------------------------------------


def test_replace_exactly_once(ctx, ws):
    r = edit.run({"mode": "replace", "path": "model_new.py", "old_str": "return x", "new_str": "return x * 2"}, ctx)
    assert r.status == "ok", r.observation
    assert (ws.root / "model_new.py").read_text().endswith("    return x * 2\n")
    assert "   5|     return x * 2" in r.observation  # the changed lines, numbered
    assert "   2| " in r.observation  # with context before


def test_replace_no_match_shows_closest_lines(ctx, ws):
    before = (ws.root / "model_new.py").read_text()
    r = edit.run({"mode": "replace", "path": "model_new.py", "old_str": "def forward(y):", "new_str": "z"}, ctx)
    assert r.status == "error"
    assert "not found" in r.observation and "   4| def forward(x):" in r.observation
    assert (ws.root / "model_new.py").read_text() == before


def test_replace_no_match_names_whitespace_difference(ctx):
    old = "def forward(x):\nreturn x"  # the indentation of line 5 left out
    r = edit.run({"mode": "replace", "path": "model_new.py", "old_str": old, "new_str": "z"}, ctx)
    assert r.status == "error"
    assert "lines 4-5 (differs only in whitespace)" in r.observation and "   5|     return x" in r.observation


def test_replace_nothing_similar(ctx):
    r = edit.run({"mode": "replace", "path": "model_new.py", "old_str": "QQQQQQQQQQQQQQQQ", "new_str": "z"}, ctx)
    assert r.status == "error" and "nothing similar" in r.observation


def test_replace_many_matches_lists_lines(ctx, ws):
    (ws.root / "k.cu").write_text("int a = 0;\nint b = 0;\nfloat c;\nint d = 0;\n")
    r = edit.run({"mode": "replace", "path": "k.cu", "old_str": " = 0;", "new_str": " = 1;"}, ctx)
    assert r.status == "error"
    assert "3 times" in r.observation and "on lines 1, 2, 4" in r.observation and "surrounding lines" in r.observation
    assert (ws.root / "k.cu").read_text().count("= 0;") == 3


def test_replace_needs_new_str_and_rejects_unknown_fields(ctx, ws):
    r = edit.run({"mode": "replace", "path": "model_new.py", "old_str": "return x"}, ctx)
    assert r.status == "error" and "needs new_str" in r.observation
    r = edit.run({"mode": "replace", "path": "model_new.py", "old_string": "x", "new_str": "y"}, ctx)
    assert r.status == "error" and "old_string" in r.observation
    r = edit.run({"mode": "rewrite", "path": "model_new.py"}, ctx)
    assert r.status == "error" and "mode" in r.observation


def test_replace_keeps_crlf_and_file_mode(ctx, ws):
    p = ws.root / "run.sh"
    p.write_bytes(b"echo a\r\necho b\r\n")
    p.chmod(0o755)
    assert edit.run({"mode": "replace", "path": "run.sh", "old_str": "echo b", "new_str": "echo c"}, ctx).status == "ok"
    assert p.read_bytes() == b"echo a\r\necho c\r\n"
    assert p.stat().st_mode & 0o777 == 0o755
    assert not [q for q in ws.root.iterdir() if q.name.endswith(".tmp")]  # no temporary file left


# ---- edit_file: insert ----------------------------------------------------------------------


@pytest.mark.parametrize("line,expected", [(0, "X\na\nb\n"), (1, "a\nX\nb\n"), (2, "a\nb\nX\n")])
def test_insert(ctx, ws, line, expected):
    (ws.root / "f.txt").write_text("a\nb\n")
    r = edit.run({"mode": "insert", "path": "f.txt", "insert_line": line, "new_str": "X"}, ctx)
    assert r.status == "ok", r.observation
    assert (ws.root / "f.txt").read_text() == expected
    assert f"{line + 1:>4}| X" in r.observation


def test_insert_after_last_line_without_newline(ctx, ws):
    (ws.root / "f.txt").write_text("a\nb")
    assert edit.run({"mode": "insert", "path": "f.txt", "insert_line": 2, "new_str": "c\nd\n"}, ctx).status == "ok"
    assert (ws.root / "f.txt").read_text() == "a\nb\nc\nd\n"


def test_insert_past_end_and_missing_line(ctx, ws):
    r = edit.run({"mode": "insert", "path": "model_new.py", "insert_line": 9, "new_str": "x"}, ctx)
    assert r.status == "error" and "insert_line=5 appends" in r.observation
    r = edit.run({"mode": "insert", "path": "model_new.py", "new_str": "x"}, ctx)
    assert r.status == "error" and "needs insert_line" in r.observation


# ---- edit_file: create ----------------------------------------------------------------------


def test_create_new_file_in_new_folder(ctx, ws):
    r = edit.run({"mode": "create", "path": "kernels/sub/mul.cu", "file_text": "a\nb\n"}, ctx)
    assert r.status == "ok" and "created kernels/sub/mul.cu (2 lines" in r.observation
    assert (ws.root / "kernels" / "sub" / "mul.cu").read_text() == "a\nb\n"


def test_create_refuses_to_overwrite_unless_asked(ctx, ws):
    r = edit.run({"mode": "create", "path": "model_new.py", "file_text": "new\n"}, ctx)
    assert r.status == "error" and "already exists" in r.observation and "overwrite=true" in r.observation
    assert "forward" in (ws.root / "model_new.py").read_text()
    r = edit.run({"mode": "create", "path": "model_new.py", "file_text": "new\n", "overwrite": True}, ctx)
    assert r.status == "ok" and "overwrote" in r.observation
    assert (ws.root / "model_new.py").read_text() == "new\n"


def test_create_needs_file_text(ctx, ws):
    r = edit.run({"mode": "create", "path": "empty.py"}, ctx)
    assert r.status == "error" and "needs file_text" in r.observation and not (ws.root / "empty.py").exists()


# ---- list_files -----------------------------------------------------------------------------


def test_list_tree_with_sizes_hides_git_and_build_outputs(ctx, ws):
    (ws.root / "kernels" / "build").mkdir()
    (ws.root / "kernels" / "build" / "libk.so").write_bytes(b"\0" * 10)
    (ws.root / "kernels" / "add.o").write_bytes(b"\0")
    (ws.root / "__pycache__").mkdir()
    r = ls.run({}, ctx)
    assert r.status == "ok"
    lines = r.observation.splitlines()
    assert lines[0].startswith("./ (3 files")
    cu, model = (ws.root / "kernels" / "add.cu").stat().st_size, (ws.root / "model.py").stat().st_size
    assert f"  kernels/ (1 files, {cu} B)" in lines
    assert f"    add.cu  {cu} B" in lines
    assert f"  model.py  {model} B" in lines
    for hidden in (".git", "config", "build", "libk.so", "add.o", "__pycache__"):
        assert not any(line.strip().startswith(hidden) for line in lines), hidden
    assert "4 entries hidden" in r.observation


def test_list_subfolder_and_symlink_not_followed(ctx, ws, tmp_path):
    os.symlink(tmp_path, ws.root / "kernels" / "out")
    r = ls.run({"path": "kernels"}, ctx)
    assert r.observation.splitlines()[0].startswith("kernels/ (1 files")
    assert f"  out -> {tmp_path}" in r.observation
    assert "ws/" not in r.observation  # the link's target was not walked
    assert ls.run({"path": "model.py"}, ctx).status == "error"
    assert "does not exist" in ls.run({"path": "nope"}, ctx).observation


def test_list_many_files_is_cut(ctx, ws):
    many = ws.root / "many"
    many.mkdir()
    for i in range(1000):
        (many / f"f{i:04}.txt").write_text("x")
    r = ls.run({}, ctx)
    assert len(r.observation) <= MAX_OBSERVATION and "more entries not shown" in r.observation
    assert r.data["files"] == 1003
