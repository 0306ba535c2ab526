"""The workspace's git history: every evaluation is a commit with its metrics as trailers, and the
branch `best` points at the best correct version so far. `git log` is the optimisation history.

The repository is kept beside the workspace, `<run>/workspace.git` (git_dir.py), out of the
model's reach: the jail of the shell, profile and sanitize shows the run folder empty and the file
tools stay inside the workspace. Every harness call names it (GIT_DIR, GIT_WORK_TREE); nothing in
the workspace is ever followed to find it. Seen when `.git` lived inside the workspace: the model's
`.git/logs/HEAD`, a symlink to a host file, got the harness's reflog lines appended to that file; a
`.git` pointing at another run made the harness commit there and move that run's `best`; hooks,
fsmonitor, pager and filters the model planted ran, as root, at the user's first `git log`. The
workspace's `.git` is a file the harness writes (`gitdir: ../workspace.git`), written again at every
commit and at the run's end whatever the model left there, so a person's git in the workspace
reads the harness's repository; any `.git` below the root is removed then (staging.py).

Trailers and `best` are written for people and their git commands only. What versions were
evaluated and how they scored is read from the harness's verdict ledger in the run folder
(ledger.py), each entry found in the history by the content hash of its files (content.py): a
commit no entry holds the content of is not a result.

Git runs here as the harness's tool, never as the workspace's: every git call gets a minimal
environment (no API keys, no user or system config), hooks pointed at /dev/null, fsmonitor off,
and the filter drivers the repository's config defines emptied (the config is the harness's, but
a run made before the repository moved out kept it within the model's reach). What a version holds
(model_new.py and kernels/) is added by explicit pathspecs with --force, so a .gitignore (a
model-written `*`) cannot keep the kernels out of it; what the gate (staging.py) refuses is not
added at all.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path

import git

from ..eval.verdict import Verdict
from ..filenames import BUILD_OUTPUTS, shown
from ..run_folder import RunFolder
from .content import MAX_OBJECT_BYTES, VERSION_PATHS, content_digests, parse_batch
from .git_dir import find_git_dir, git_dir_of, is_legacy, point_work_tree, remove_entry
from .ledger import LedgerEntry, append_entry, best_entries, read_entries
from .paths import WorkspaceError
from .staging import Gate, scan
from .trailers import LOG_FORMAT, VersionInfo, failing_guards, metrics_of, parse_log, subject_line, version_message

IDENTITY = "cuda-agent"
MAIN = "main"
BEST_REF = "refs/heads/best"
GIT_TIMEOUT_S = 300
# config every git call runs with, over whatever the repository's own config says
HARNESS_CONFIG = {
    "core.hooksPath": os.devnull,  # no hook runs: pre-commit, post-commit, reference-transaction...
    "core.fsmonitor": "false",
    "core.sshCommand": "false",
    "core.attributesFile": os.devnull,
    "core.excludesFile": os.devnull,
    "core.autocrlf": "false",
    "core.bare": "false",
    "commit.gpgSign": "false",
    "tag.gpgSign": "false",
    "gc.auto": "0",
    "maintenance.auto": "false",
    "core.pager": "cat",
    "core.editor": "false",
    "protocol.allow": "never",  # never a program of the repo's
    "user.name": IDENTITY,
    "user.email": f"{IDENTITY}@localhost",
}
# the repository's own config, for a person's git too: a work tree's (not bare), reflogs, our identity, no hooks
LOCAL_CONFIG = {
    "core.bare": "false",
    "core.logAllRefUpdates": "true",
    **{k: HARNESS_CONFIG[k] for k in ("user.name", "user.email", "commit.gpgSign", "core.hooksPath")},
}
_EXCLUDES = tuple(f":(exclude,glob)**/{p}" + ("/**" if "*" not in p else "") for p in BUILD_OUTPUTS)


def git_env(config: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The whole environment of a harness git call: PATH and the time zone from ours, nothing else
    (no keys); no system or global config; `config` (HARNESS_CONFIG, then more) on top of the repo's."""
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": os.devnull,
        "LC_ALL": "C",
        "LANG": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_NO_REPLACE_OBJECTS": "1",
    }
    # the time a commit is stamped with
    env.update({n: os.environ[n] for n in ("TZ", "GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE") if n in os.environ})
    items = list({**HARNESS_CONFIG, **(config or {})}.items())
    env["GIT_CONFIG_COUNT"] = str(len(items))
    for i, (key, value) in enumerate(items):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    env.update(extra)
    return env


def run_git(
    args: list[str],
    env: dict[str, str],
    cwd: Path | None = None,
    *,
    stdin: bytes | None = None,
    ok: tuple[int, ...] = (0,),
) -> subprocess.CompletedProcess:
    """git with exactly `env`; a status outside `ok` raises git.GitCommandError (as GitPython would)."""
    argv = [git.Git.GIT_PYTHON_GIT_EXECUTABLE or "git", *args]
    try:
        proc = subprocess.run(argv, env=env, cwd=cwd, input=stdin, capture_output=True, timeout=GIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise git.GitCommandError(argv, -1, f"git took over {GIT_TIMEOUT_S} s".encode()) from None
    if proc.returncode not in ok:
        raise git.GitCommandError(argv, proc.returncode, proc.stderr, proc.stdout)
    return proc


def lock_files(git_dir: Path) -> list[Path]:
    """Lock files a git process that died left in `git_dir` (index.lock, refs/**/*.lock...): they fail later writes."""
    git_dir = Path(git_dir)
    return sorted(p for p in [*git_dir.glob("*.lock"), *(git_dir / "refs").rglob("*.lock")] if p.is_file())


def lock_holder(lock: Path, work_tree: Path, git_dir: Path) -> str | None:
    """A running process that may hold `lock` ("pid N (name)"), or None: one with the file open, or a git process
    working in `work_tree` or `git_dir` (git closes the lock file before it runs an editor or a hook, and keeps
    it). Compared by device and inode, so a process in the jail (where the work tree has another path) is seen
    too; processes of other users, whose /proc entries are closed, cannot write this workspace."""
    try:
        lock_id = _file_id(lock)
        tree_ids = {_file_id(work_tree), _file_id(git_dir)}
    except OSError:
        return None
    for entry in (e for e in os.scandir("/proc") if e.name.isdigit()):
        with suppress(OSError):  # gone meanwhile, or not ours to read
            name = Path(entry.path, "comm").read_text().strip()
            if name.startswith("git") and _file_id(Path(entry.path, "cwd")) in tree_ids:
                return f"pid {entry.name} ({name})"
            for fd in os.scandir(Path(entry.path, "fd")):
                with suppress(OSError):
                    if _file_id(Path(fd.path)) == lock_id:
                        return f"pid {entry.name} ({name})"
    return None


def _file_id(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def init_repo(root: Path) -> git.Repo:
    """A new repository for the workspace at `root`, kept beside it (git_dir.py), and the workspace's `.git`
    pointing at it: `git init --bare` (no template: no sample hooks), then a work tree's, with a local identity,
    no signing and no hooks, as every call has."""
    root = Path(root).resolve()
    git_dir = git_dir_of(root)
    run_git(["init", "-q", "--bare", f"--initial-branch={MAIN}", "--template=", str(git_dir)], git_env())
    for key, value in LOCAL_CONFIG.items():
        run_git(["config", "--local", key, value], git_env(GIT_DIR=str(git_dir)), root)
    point_work_tree(root, git_dir)
    return git.Repo(git_dir)


class History:
    """Commits and reads versions of one workspace repository."""

    def __init__(self, repo: git.Repo):
        self.repo = repo
        self.git_dir = Path(repo.git_dir).resolve()
        # <run>/workspace.git keeps <run>/workspace (a run of an older release: the folder holding .git)
        if not is_legacy(self.git_dir) and not self.git_dir.name.endswith(".git"):
            raise WorkspaceError(f"{self.git_dir} is not a workspace's repository (<folder>.git beside the folder)")
        self.work_tree = (
            self.git_dir.parent
            if is_legacy(self.git_dir)
            else self.git_dir.with_name(self.git_dir.name[: -len(".git")])
        )
        # Every git command names this repository: were the workspace's .git gone (or its folder
        # inside another work tree), git's upward search would otherwise commit to whatever
        # repository encloses it. Seen once: a version commit landed in the project's own repo.
        self._env = git_env(GIT_DIR=str(self.git_dir), GIT_WORK_TREE=str(self.work_tree))
        # GitPython's own calls on this repo (tests, older callers) get the same repository and config
        # (GitPython always passes its process environment on, so keys can't be dropped there: prefer `git`)
        repo.git.update_environment(
            **{k: v for k, v in self._env.items() if k.startswith("GIT_") and k != "GIT_TERMINAL_PROMPT"}
        )
        # the harness's record of its evaluations: in the run folder, beyond the model's reach
        self.ledger = RunFolder.around(self.work_tree).ledger
        self._digests: dict[str, str | None] = {}  # commit -> content hash (a commit's objects never change)
        self.findings: list[str] = []  # what the last staging kept out or replaced, one line each (staging.py)

    @classmethod
    def open(cls, work_tree: Path) -> History:
        """The history of the workspace at `work_tree` (WorkspaceError when it has none); its `.git` is never read."""
        return cls(git.Repo(find_git_dir(work_tree)))

    def git(self, *args: str, stdin: bytes | None = None, ok: tuple[int, ...] = (0,)) -> str:
        """A read-only git command's output (`log`...), non-UTF-8 paths as surrogate escapes (to round-trip to disk)."""
        return self._run(list(args), stdin=stdin, ok=ok).stdout.decode("utf-8", "surrogateescape")

    def _run(
        self,
        args: list[str],
        *,
        stdin: bytes | None = None,
        ok: tuple[int, ...] = (0,),
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        return run_git(args, env or self._env, self.work_tree, stdin=stdin, ok=ok)

    def _tree_env(self) -> dict[str, str]:
        """The environment of commands on the work tree (add, commit, checkout): filter drivers do nothing there."""
        return git_env(self._driver_overrides(), GIT_DIR=self._env["GIT_DIR"], GIT_WORK_TREE=self._env["GIT_WORK_TREE"])

    def _driver_overrides(self) -> dict[str, str]:
        """Empty commands for every filter driver the config (includes too) defines: a `filter=` runs nothing."""
        out = self.git("config", "-z", "--name-only", "--get-regexp", r"^filter\.", ok=(0, 1))
        drivers = {name.split(".", 1)[1].rsplit(".", 1)[0] for name in out.split("\0") if name.count(".") >= 2}
        return {
            f"filter.{d}.{k}": v
            for d in sorted(drivers)
            for k, v in (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false"))
        }

    def stage(self, env: dict[str, str] | None = None) -> list[str]:
        """Stage the work tree: everything as .gitignore says (deletions included), then what a
        version holds (model_new.py, kernels/ but their build outputs) whatever .gitignore says.
        What the gate refuses (staging.py: a FIFO, a file over the size cap) is not added, and
        leaves the index, were it there; a file git cannot read is skipped (--ignore-errors), not a
        failed commit. The workspace's `.git` pointer is written again and any `.git` below the root
        removed first (`disarm`). Returns, and keeps in `findings`, one line per thing done so."""
        env = env or self._tree_env()
        gate = scan(self.work_tree)
        notes = self.disarm(gate)
        skipped = [b":(exclude,literal)" + p for p in gate.skipped]
        if gate.skipped:  # out of the index too: the version then lacks the file rather than holding a stale copy
            self._run(
                ["update-index", "-z", "--force-remove", "--stdin"],
                env=env,
                stdin=b"".join(p + b"\0" for p in gate.skipped),
            )
        self._add([], skipped, env)
        if present := [p for p in VERSION_PATHS if os.path.lexists(self.work_tree / p)]:
            self._add(["--force"], [*(p.encode() for p in (*present, *_EXCLUDES)), *skipped], env)
        self.findings = [*notes, *gate.findings()]
        return self.findings

    def _add(self, flags: list[str], pathspecs: list[bytes], env: dict[str, str]) -> None:
        # pathspecs on stdin: any number of them, any bytes in a name
        spec = ["--pathspec-from-file=-", "--pathspec-file-nul"] if pathspecs else []
        self._run(
            ["add", "-A", "--ignore-errors", *flags, *spec],
            stdin=b"".join(p + b"\0" for p in pathspecs),
            ok=(0, 1),
            env=env,
        )

    def disarm(self, gate: Gate | None = None) -> list[str]:
        """Leave no `.git` in the work tree but the harness's pointer (git_dir.py): the model's shell may have made
        one a folder of its own (hooks, a config with a pager), a symlink, or a repository below the root, which a
        person's git there would run (`gate`: a scan of the work tree already made). What was replaced or
        removed, one line each."""
        if is_legacy(self.git_dir):
            return []  # a run of an older release: read, never continued (Workspace.open)
        notes = []
        try:  # never a failed commit: the harness's own calls do not read the workspace's .git anyway
            if (was := point_work_tree(self.work_tree, self.git_dir)) is not None:
                notes.append(
                    f".git was {was}: replaced by the harness's pointer to the history, which it keeps "
                    "outside the workspace, beyond the shell's reach"
                )
        except OSError as e:
            notes.append(f".git could not be replaced by the harness's pointer ({e.strerror}): delete it")
        for path in (gate or scan(self.work_tree)).nested_git:
            try:
                remove_entry(self.work_tree / os.fsdecode(path))
                notes.append(
                    f"{shown(os.fsdecode(path))} removed: the workspace's history is the harness's, kept outside it"
                )
            except OSError as e:
                notes.append(f"{shown(os.fsdecode(path))} could not be removed ({e.strerror}): delete it")
        return notes

    def commit(self, message: str, *, allow_empty: bool = False) -> str | None:
        """Stage (see `stage`) and commit; None when there was nothing to commit."""
        env = self._tree_env()
        self.stage(env)
        if not allow_empty and not self._staged():
            return None
        args = ["commit", "-q", "--no-verify", "--cleanup=whitespace", "-F", "-"]
        self._run([*args, *(["--allow-empty"] if allow_empty else [])], stdin=message.encode(), env=env)
        return self.head()

    snapshot = commit  # uncommitted work (new, changed or deleted files) kept; None when clean

    def commit_version(self, verdict: Verdict, note: str = "") -> VersionInfo:
        """Commit the work tree as the next version (even if unchanged), record the verdict in the
        ledger under the content hash of what was committed, and point `best` (display) at the best."""
        entries = self.entries()
        number = max((e.version for e in entries), default=0) + 1  # the ledger's: trailers are forgeable
        sha = self.commit(version_message(verdict, number, note), allow_empty=True)
        assert sha is not None  # allow_empty always commits
        m = metrics_of(verdict)
        unheld = self.unheld(sha, verdict.judged_files)
        if unheld:  # what was judged is not what was committed: this verdict is no version's result
            self.findings += [
                f"{line}: this evaluation is no version's result (it cannot rank as best or count as a reward)"
                for line in unheld
            ]
        entry = LedgerEntry(
            **m.model_dump(),
            content=None if unheld else self.content_digest(sha),
            workspace=self.work_tree.name,
            version=number,
            commit=sha,
            correct=verdict.correct,
            guards=failing_guards(verdict),
            subject=subject_line(verdict, number),
        )
        append_entry(self.ledger, entry)
        if (best := self.best()) is not None:  # the ledger's best, wherever a forged ref had moved it
            self._run(["update-ref", "-m", f"best: v{best.version}", BEST_REF, best.sha])
        return self._info(entry, sha)

    def unheld(self, sha: str, judged: dict[str, str]) -> list[str]:
        """One line per judged file (path -> sha256 of the bytes judged) that commit `sha` does not hold
        byte for byte: left out (over the work tree's size cap, a `.git` removed, a build output's
        name) or rewritten on the way in (a `.gitattributes` ident, eol or text conversion)."""
        if not judged:
            return []
        listing = self.git("ls-tree", "-r", "-z", "--full-tree", sha, "--", *VERSION_PATHS)
        blobs: dict[str, str] = {}
        for item in filter(None, listing.split("\0")):
            head, _, path = item.partition("\t")
            if path in judged and head.split()[1:2] == ["blob"]:
                blobs[path] = head.split()[2]
        bodies = self._objects(list(set(blobs.values())))
        lines = []
        for path, want in judged.items():
            obj = bodies.get(blobs[path]) if path in blobs else None
            if obj is None:
                lines.append(f"{shown(path)} was judged but the version does not hold it")
            elif hashlib.sha256(obj[1]).hexdigest() != want:
                lines.append(f"{shown(path)} was judged but the version holds other bytes (a .gitattributes rule?)")
        return lines

    def same_files(self, rev: str) -> bool:
        """Whether model_new.py and kernels/, staged as a commit would stage them, are `rev`'s; commits nothing."""
        env = self._tree_env()
        self.stage(env)
        diff = ["diff", "--cached", "--quiet", "--no-ext-diff", "--no-textconv", rev, "--", *VERSION_PATHS]
        return self._run(diff, ok=(0, 1), env=env).returncode == 0

    def head(self) -> str:
        return self.git("rev-parse", "--verify", "HEAD").strip()

    def entries(self) -> list[LedgerEntry]:
        """This workspace's ledger entries, oldest first (none before its first evaluation)."""
        return [e for e in read_entries(self.ledger) or [] if e.workspace == self.work_tree.name]

    def versions(self) -> list[VersionInfo]:
        """Every evaluated version, oldest first, as the ledger records it: each at the commit it was
        recorded with, else at a commit of the history holding its content; one found nowhere is left out."""
        entries = self.entries()
        found = self._commits_of(entries, want=len(entries))
        return [self._info(e, found[id(e)]) for e in entries if id(e) in found]

    def best(self) -> VersionInfo | None:
        """The ledger's best correct version that the history holds (its content at a commit), or None."""
        for e in best_entries(self.entries()):
            if found := self._commits_of([e], want=1):
                return self._info(e, found[id(e)])
        return None

    def info(self, rev: str) -> VersionInfo | None:
        """The evaluated version commit `rev` holds (the latest evaluation of its content), or None."""
        sha = self.git("rev-parse", "--verify", "-q", f"{rev}^{{commit}}", ok=(0, 1)).strip()
        content = self.content_digest(sha) if sha else None
        matches = [e for e in self.entries() if content is not None and e.content == content]
        return self._info(matches[-1], sha) if matches else None

    def logged_versions(self) -> list[VersionInfo]:
        """The versions as the commits' trailers tell them: for display only, never a result (forgeable)."""
        return parse_log(self._log("--reverse", "HEAD"))

    def content_digest(self, sha: str) -> str | None:
        """The content hash (content.py) of model_new.py and kernels/ at commit `sha`; None: not readable."""
        return self._digests_of([sha])[sha]

    def _digests_of(self, shas: list[str]) -> dict[str, str | None]:
        todo = [s for s in dict.fromkeys(shas) if s not in self._digests]
        if todo:
            self._digests.update(content_digests(self._objects, todo))
        return {s: self._digests[s] for s in shas}

    def _commits_of(self, entries: list[LedgerEntry], want: int) -> dict[int, str]:
        """id(entry) -> a commit holding its content: the one it was recorded with, else one of HEAD's
        history (searched only when `want` entries are not found at their own commits)."""
        own = self._digests_of([e.commit for e in entries])  # a commit gone (pruned) has none
        found = {id(e): e.commit for e in entries if e.content is not None and own.get(e.commit) == e.content}
        missing = [e for e in entries if id(e) not in found and e.content is not None]
        if len(found) < want and missing:
            history = self.git("rev-list", "HEAD", ok=(0, 128)).split()[::-1]  # oldest first
            by_content: dict[str, str] = {}
            for sha, digest in self._digests_of(history).items():
                if digest is not None:
                    by_content.setdefault(digest, sha)
            found.update({id(e): by_content[e.content] for e in missing if e.content in by_content})
        return found

    def _objects(self, names: list[str]):
        """git objects by name, each checked against its name (content.parse_batch); big ones left out."""
        if not names:
            return {}
        listing = self.git(
            "cat-file",
            "--batch-check=%(objectname) %(objecttype) %(objectsize)",
            stdin="".join(f"{n}\n" for n in names).encode(),
        ).splitlines()
        small = [
            n
            for n, line in zip(names, listing)
            if len(parts := line.split()) == 3 and parts[0] == n and int(parts[2]) <= MAX_OBJECT_BYTES
        ]
        out = self._run(["cat-file", "--batch"], stdin="".join(f"{n}\n" for n in small).encode()).stdout
        found = parse_batch(out, small) if small else {}
        return {n: found.get(n) for n in names}

    @staticmethod
    def _info(e: LedgerEntry, sha: str) -> VersionInfo:
        return VersionInfo(
            **e.model_dump(include=set(VersionInfo.model_fields) - {"sha", "when"}),
            sha=sha,
            when=datetime.fromtimestamp(e.time, tz=timezone.utc),
        )

    def root_commit(self) -> str:
        """The first commit ("task: <name>"): the reference copy of every protected file."""
        return self.git("rev-list", "--max-parents=0", "HEAD").split()[-1]

    def show(self, rev: str, path: str) -> bytes:
        """A file's bytes at a commit (not the work tree's copy, which the model may have changed)."""
        return self._run(["cat-file", "blob", f"{rev}:{path}"]).stdout

    def checkout_files(self, rev: str, paths: list[str]) -> None:
        self._run(["checkout", rev, "--", *paths], env=self._tree_env())

    def _log(self, *args: str) -> str:
        out = self._run(["log", "--no-show-signature", f"--format={LOG_FORMAT}", *args]).stdout
        return out.decode("utf-8", "replace")

    def _staged(self) -> bool:
        # plumbing: no external diff or textconv; exit 1 when something is staged, 128 before the first commit
        return self._run(["diff-index", "--cached", "--quiet", "HEAD", "--"], ok=(0, 1, 128)).returncode != 0
