"""The verdict ledger: the harness's own record of its evaluations, in the run folder. Attacked as
the model would with its shell (plain git in the workspace: reward-3 trailers, a moved `best`, a
planted object) and as a hostile file in the ledger's place (FIFO, symlink, damaged or huge)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
import zlib

import pytest

from cuda_agent.eval.verdict import Verdict
from cuda_agent.run_folder import LEDGER
from cuda_agent.workspace import Workspace
from cuda_agent.workspace.content import version_digest
from cuda_agent.workspace.ledger import MAX_BYTES, LedgerEntry, LedgerError, append_entry, read_entries

FORGED = """v{n}: correct, 50.00x vs compile, reward 3

Status: correct
Correct: yes
Reward: 3
Time-Ms: 0.001
Eager-Ms: 1
Compile-Ms: 0.05
Speedup-Eager: 1000
Speedup-Compile: 50
Guards: none
Version: {n}
"""


def shell_git(ws: Workspace, *args: str, stdin: str | None = None) -> str:
    """git as a shell that reaches the repository runs it (one without the jail, --no-sandbox): found through
    the workspace's `.git` pointer, with the repository's own config."""
    env = {"PATH": os.environ["PATH"], "HOME": str(ws.root), "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", *args], cwd=ws.root, env=env, input=stdin, text=True, check=True, capture_output=True
    ).stdout


def forge(ws: Workspace, n: int, *, files: dict[str, str] | None = None) -> str:
    """A version commit the harness never evaluated, with reward-3 trailers, and `best` moved to it."""
    for rel, text in (files or {}).items():
        (ws.root / rel).write_text(text)
    shell_git(ws, "add", "-A")
    shell_git(ws, "commit", "-q", "--allow-empty", "-F", "-", stdin=FORGED.format(n=n))
    shell_git(ws, "update-ref", "refs/heads/best", "HEAD")
    return shell_git(ws, "rev-parse", "HEAD").strip()


def test_every_evaluation_is_a_ledger_line_in_the_run_folder(ws, verdicts):
    (ws.root / "kernels" / "k.cu").write_text("// v1\n")
    v1 = ws.commit_version(verdicts.correct(2, 0.5))
    v2 = ws.commit_version(verdicts.incorrect(1, 3))
    ledger = ws.root.parent / LEDGER
    entries = read_entries(ledger)
    assert [(e.version, e.commit, e.status, e.reward) for e in entries] == [
        (1, v1.sha, "correct", 2),
        (2, v2.sha, "incorrect", -1),
    ]
    assert entries[0].content == entries[1].content == ws.history.content_digest(v1.sha)  # the same files
    assert entries[0].time_ms == 0.5 and entries[0].speedup_compile == pytest.approx(1.8)
    assert ws.best() == v1 and ws.best().content == entries[0].content
    assert not (ws.root / LEDGER).exists()  # outside the workspace


def test_a_new_workspace_starts_with_an_empty_ledger(ws):
    assert read_entries(ws.root.parent / LEDGER) == [] and ws.best() is None and ws.versions() == []


def test_the_content_hash_covers_every_byte_of_model_new_and_kernels(ws, verdicts):
    a = ws.commit_version(verdicts.incorrect(0, 1)).content
    (ws.root / "kernels" / "sub").mkdir()
    (ws.root / "kernels" / "sub" / "x.cuh").write_text("// header\n")
    b = ws.commit_version(verdicts.incorrect(0, 1)).content
    (ws.root / "model_new.py").write_text((ws.root / "model_new.py").read_text() + " ")
    c = ws.commit_version(verdicts.incorrect(0, 1)).content
    assert len({a, b, c}) == 3
    files = {
        p.relative_to(ws.root).as_posix().encode(): p.read_bytes()
        for p in [ws.root / "model_new.py", *sorted((ws.root / "kernels").rglob("*"))]
        if p.is_file()
    }
    assert c == version_digest([(path, b"100644", body) for path, body in files.items()])


def test_a_forged_version_commit_and_best_ref_change_nothing(ws, verdicts):
    real = ws.commit_version(verdicts.correct(1, 2.0))
    forged = forge(ws, 2, files={"kernels/fast.cu": "// does nothing\n"})
    assert shell_git(ws, "rev-parse", "best").strip() == forged  # what `git log` shows now
    assert ws.best() == real and [v.sha for v in ws.versions()] == [real.sha]
    assert ws.history.info(forged) is None
    # the trailers still read as the forger wrote them: display only
    assert ws.history.logged_versions()[-1].reward == 3
    # the next real evaluation is numbered by the ledger and puts `best` back where the ledger says
    nxt = ws.commit_version(verdicts.incorrect(0, 2))
    assert nxt.version == 2 and shell_git(ws, "rev-parse", "best").strip() == real.sha


def test_forged_trailers_on_really_evaluated_content_keep_the_real_verdict(ws, verdicts):
    (ws.root / "kernels" / "k.cu").write_text("// wrong\n")
    wrong = ws.commit_version(verdicts.incorrect(1, 3))
    forged = forge(ws, 2)  # the same files, committed again with reward 3
    assert ws.best() is None
    assert ws.history.info(forged).reward == -1  # what the ledger says of that content
    assert [v.version for v in ws.versions()] == [wrong.version]


def test_a_rewritten_history_keeps_the_results_the_ledger_can_still_find(ws, verdicts):
    (ws.root / "kernels" / "k.cu").write_text("// fast\n")
    good = ws.commit_version(verdicts.correct(3, 0.5))
    (ws.root / "kernels" / "k.cu").write_text("// slow\n")
    ws.commit_version(verdicts.correct(2, 1.0))
    shell_git(ws, "reset", "-q", "--hard", f"{good.sha}^")  # both commits off the branch
    assert ws.best() == good  # its commit is still there, holding the content the ledger scored


def test_an_object_planted_under_the_name_of_what_is_about_to_be_evaluated_is_not_read_back(ws, verdicts):
    """git never rewrites an object it has: planted under the name of content C with other bytes,
    it would be read back in C's place. Read objects are checked against their names."""
    honest, other = b"// the kernel evaluated\n", b"// something else entirely\n"
    name = hashlib.sha1(b"blob %d\0" % len(honest) + honest).hexdigest()
    loose = ws.history.git_dir / "objects" / name[:2] / name[2:]
    loose.parent.mkdir(parents=True, exist_ok=True)
    loose.write_bytes(zlib.compress(b"blob %d\0" % len(other) + other))
    (ws.root / "kernels" / "k.cu").write_bytes(honest)
    v = ws.commit_version(verdicts.correct(3, 0.5))
    assert ws.history.show(v.sha, "kernels/k.cu") == other  # git itself reads the planted bytes
    assert read_entries(ws.root.parent / LEDGER)[-1].content is None  # so its content is unknown
    assert ws.best() is None and ws.versions() == []  # not a result: the other bytes never scored


def test_two_workspaces_beside_each_other_keep_their_own_entries(task, template, tmp_path, verdicts):
    a = Workspace.create(task, template=template, path=tmp_path / "a")
    b = Workspace.create(task, template=template, path=tmp_path / "b")
    a.commit_version(verdicts.correct(3, 0.5))
    assert b.best() is None and b.versions() == []
    assert b.commit_version(verdicts.incorrect(0, 1)).version == 1


def entry(n: int = 1) -> LedgerEntry:
    return LedgerEntry(
        status="correct", reward=3, content="c" * 64, workspace="workspace", version=n, commit="a" * 40, correct=True
    )


def test_the_ledger_round_trips_and_a_torn_last_line_is_left_out(tmp_path):
    path = tmp_path / LEDGER
    assert read_entries(path) is None  # no ledger: a run made before it existed
    append_entry(path, entry(1))
    append_entry(path, entry(2))
    with open(path, "ab") as f:
        f.write(b'{"status": "corr')  # a crash mid-write
    assert [e.version for e in read_entries(path)] == [1, 2]


@pytest.mark.parametrize("bad", [b'{"status": "correct"}\n', b"not json\n"])
def test_a_damaged_line_is_one_line_error(tmp_path, bad):
    path = tmp_path / LEDGER
    append_entry(path, entry(1))
    with open(path, "ab") as f:
        f.write(bad)
    append_entry(path, entry(2))
    with pytest.raises(LedgerError, match="line 2 is not a ledger entry"):
        read_entries(path)


def _with_deadline(fn, seconds: float = 5.0):
    out: list = []
    t = threading.Thread(target=lambda: out.append(_catch(fn)), daemon=True)
    t.start()
    t.join(seconds)
    assert out, "hung"
    return out[0]


def _catch(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test looks at which
        return e
    return None


def test_a_fifo_in_the_ledgers_place_is_an_error_not_a_hang(tmp_path):
    path = tmp_path / LEDGER
    os.mkfifo(path)
    for fn in (lambda: read_entries(path), lambda: append_entry(path, entry())):
        err = _with_deadline(fn)
        assert isinstance(err, LedgerError) and "\n" not in str(err)


def test_a_symlink_in_the_ledgers_place_is_never_followed(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root-only\n")
    path = tmp_path / LEDGER
    path.symlink_to(secret)
    with pytest.raises(LedgerError, match="symlink"):
        read_entries(path)
    with pytest.raises(LedgerError):
        append_entry(path, entry())
    assert secret.read_text() == "root-only\n"


def test_a_ledger_over_the_cap_is_refused(tmp_path):
    path = tmp_path / LEDGER
    with open(path, "wb") as f:
        f.truncate(MAX_BYTES + 1)
    with pytest.raises(LedgerError, match="cap"):
        read_entries(path)


def test_a_commit_whose_ledger_cannot_be_written_is_a_clear_error(ws, verdicts):
    (ws.root.parent / LEDGER).unlink()
    os.mkfifo(ws.root.parent / LEDGER)
    err = _with_deadline(lambda: ws.commit_version(Verdict(status="compile_error", error="x")))
    assert isinstance(err, LedgerError)


def _judged(ws: Workspace, *names: str) -> dict[str, str]:
    """Verdict.judged_files for these files of the work tree, as the evaluator hashes them."""
    return {n: hashlib.sha256((ws.root / n).read_bytes()).hexdigest() for n in names}


def test_a_version_that_holds_what_was_judged_is_a_result(ws, verdicts):
    (ws.root / "kernels" / "k.cu").write_text('#include "impl.h"\n')
    (ws.root / "kernels" / "impl.h").write_text("// impl\n")
    judged = _judged(ws, "model_new.py", "kernels/k.cu", "kernels/impl.h")
    ws.commit_version(verdicts.correct(3, 0.5).model_copy(update={"judged_files": judged}))
    (entry,) = ws.history.entries()
    assert entry.content is not None and ws.best() is not None and ws.history.findings == []


@pytest.mark.parametrize("how", ["dot_git", "gitattributes", "size_cap"])
def test_a_judged_file_the_version_does_not_hold_as_judged_makes_no_result(ws, verdicts, monkeypatch, how):
    """Red team: code the build read from kernels/.git/impl.h (a nested `.git` is removed before the
    commit), a `.gitattributes` ident that rewrites the committed bytes, and a header left out by
    the work tree's size cap, were each recorded as a reward-1 version that could not be rebuilt."""
    header = {"dot_git": "kernels/.git/impl.h", "gitattributes": "kernels/tag.h", "size_cap": "kernels/zz.h"}[how]
    (ws.root / header).parent.mkdir(parents=True, exist_ok=True)
    (ws.root / header).write_text('#define TAG "$Id: JUDGED-BYTES $"\n')
    (ws.root / "kernels" / "k.cu").write_text(f'#include "{header.removeprefix("kernels/")}"\n')
    if how == "gitattributes":
        (ws.root / ".gitattributes").write_text("kernels/tag.h ident\n")
    if how == "size_cap":
        from cuda_agent.workspace import staging

        taken = sum(p.stat().st_size for p in ws.root.rglob("*") if p.is_file() and ".git" not in p.parts)
        monkeypatch.setattr(staging, "MAX_TOTAL_BYTES", taken - 8)
    judged = _judged(ws, "model_new.py", "kernels/k.cu", header)
    ws.commit_version(verdicts.correct(3, 0.5).model_copy(update={"judged_files": judged}))
    (entry,) = ws.history.entries()
    assert entry.content is None and not entry.is_result and ws.best() is None
    # the size cap may take model_new.py first: whichever judged file the version lacks is named
    lines = [f for f in ws.history.findings if " was judged but the version " in f]
    assert lines and all("no version's result" in f for f in lines), ws.history.findings
    if how != "size_cap":
        assert lines[0].startswith(f"{header} was judged but the version")
