"""A per-task workspace: the folder the model works in, made from workspace_template/ and kept
as a git repository whose log is the optimisation history (docs/workspace.md).

    runs/<task>-<YYYYmmdd-HHMMSS>/workspace/
      model.py  model.inputs.py  SKILL.md  kernel_runtime.py    protected (hash-checked)
      model_new.py  kernels/                                     the candidate
      .cuda-agent/workspace.json                                 task identity, protected hashes
      .git                                                       a pointer: gitdir: ../workspace.git
    runs/<task>-<YYYYmmdd-HHMMSS>/workspace.git/                 the history, out of the model's reach

The run folder around it (`Workspace.run_folder`) is run_folder.py's: the trajectory, the ledger...
"""

from __future__ import annotations

import hashlib
import os
import shutil
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path

import git
from pydantic import BaseModel, ValidationError

from ..eval.verdict import Verdict
from ..run_folder import RunFolder
from ..task import Task
from .git_dir import find_git_dir, git_dir_of, is_legacy
from .history import History, init_repo, lock_files, lock_holder
from .ledger import start_ledger
from .paths import META_DIR, PROTECTED, RECORD, WorkspaceError, enclosing_git_root, new_run_dir, resolve_in, sha256_file
from .run_lock import hold_run, release_run
from .trailers import VersionInfo

PACKAGE = Path(__file__).resolve().parent.parent
DEFAULT_TEMPLATE = PACKAGE / "workspace_template"
RUNTIME = PACKAGE / "kernels" / "runtime.py"
SKILL = PACKAGE / "skills" / "SKILL.md"  # used when the template carries no SKILL.md of its own
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".git", "build")


class TaskRecord(BaseModel):
    name: str
    class_name: str
    source_hash: str
    path: str  # the original task file, outside the workspace
    inputs_path: str | None = None


class WorkspaceRecord(BaseModel):
    """What `.cuda-agent/workspace.json` holds; read back from the first commit, never the work tree."""

    format: int = 1
    task: TaskRecord
    protected: dict[str, str]  # file -> sha256 at creation
    created: str


class Workspace:
    """One task's workspace; make it with `create`, continue it with `open`."""

    def __init__(self, root: Path, repo: git.Repo, record: WorkspaceRecord):
        self.root, self.repo, self.record = root, repo, record
        self.history = History(repo)
        self.removed_locks: list[Path] = []  # stale git locks `open` removed (a killed run's), to say so
        # run_lock.py: held until release(), taken before anything is cleared or committed (not a live run's)
        self._run_lock: Path | None = hold_run(self.history.git_dir)

    @classmethod
    def create(
        cls, task: Task, template: Path = DEFAULT_TEMPLATE, runs_dir: Path = Path("runs"), path: Path | None = None
    ) -> Workspace:
        """A new workspace for `task`: in a fresh run folder under `runs_dir`, or exactly at `path`."""
        template = Path(template)
        if not template.is_dir():
            raise WorkspaceError(f"workspace template not found at {template}: reinstall cuda-agent or pass a template")
        if path is None:
            if (owner := enclosing_git_root(Path(runs_dir))) is not None:
                raise WorkspaceError(
                    f"{runs_dir} is inside the git repository at {owner}: pass --out DIR outside it "
                    "(or an explicit workspace path to put it there anyway)"
                )
            made = new_run_dir(Path(runs_dir), task.name)
            root = RunFolder(made).workspace
        else:
            root = Path(path)
            if root.exists() and (not root.is_dir() or any(root.iterdir())):
                raise WorkspaceError(f"{root} exists and is not empty: give a new folder, or open it to continue")
            if os.path.lexists(git_dir_of(root)):  # where its history goes
                raise WorkspaceError(f"{git_dir_of(root)} exists beside {root}: give another folder, or remove it")
            made = None if root.exists() else root
        root.mkdir(parents=True, exist_ok=True)
        try:
            return cls._fill(root.resolve(), task, template)
        except BaseException:
            # no half-made workspace left behind to be mistaken for one; the user's own empty folder stays
            shutil.rmtree(made if made is not None else root, ignore_errors=True)
            shutil.rmtree(git_dir_of(root), ignore_errors=True)  # it did not exist before
            if made is None:
                root.mkdir(exist_ok=True)
            raise

    @classmethod
    def _fill(cls, root: Path, task: Task, template: Path) -> Workspace:
        shutil.copytree(template, root, dirs_exist_ok=True, ignore=_SKIP)
        if not (root / "SKILL.md").exists() and SKILL.is_file():
            shutil.copyfile(SKILL, root / "SKILL.md")
        shutil.copyfile(task.path, root / "model.py")
        if task.inputs_path is not None:  # named so load_task finds it as model.py's sidecar
            shutil.copyfile(task.inputs_path, root / "model.inputs.py")
        shutil.copyfile(RUNTIME, root / "kernel_runtime.py")
        protected = {name: digest for name in PROTECTED if (digest := sha256_file(root / name))}
        task_record = TaskRecord(
            name=task.name,
            class_name=task.class_name,
            source_hash=task.source_hash,
            path=str(task.path),
            inputs_path=str(task.inputs_path) if task.inputs_path else None,
        )
        record = WorkspaceRecord(
            task=task_record, protected=protected, created=datetime.now(timezone.utc).isoformat(timespec="seconds")
        )
        (root / META_DIR).mkdir(exist_ok=True)
        (root / RECORD).write_text(record.model_dump_json(indent=2) + "\n")
        repo = init_repo(root)
        origin = f"From {task.path}, class {task.class_name}, hash {task.source_hash}."
        history = History(repo)
        history.commit(f"task: {task.name}\n\n{origin}")
        start_ledger(history.ledger)  # the run has a ledger from its start: one without predates it
        return cls(root, repo, record)

    @classmethod
    def open(cls, path: Path) -> Workspace:
        """Continue an existing workspace (a run folder is accepted too); uncommitted work is committed
        first. A git lock file no running process holds (a run killed mid-commit) is removed first
        (listed in `removed_locks`); one a running process may hold is a WorkspaceError saying what to do."""
        folder = Path(path)
        if not git_dir_of(folder).is_dir() and RunFolder(folder).workspace.is_dir():
            folder = RunFolder(folder).workspace
        not_one = f"{path} is not a cuda-agent workspace: give a run's workspace/ folder (it holds {RECORD})"
        try:
            git_dir = find_git_dir(folder)
        except WorkspaceError:
            raise WorkspaceError(not_one) from None
        try:
            repo = git.Repo(git_dir)
            history = History(repo)
            record = WorkspaceRecord.model_validate_json(history.show(history.root_commit(), RECORD))
        except (git.GitCommandError, git.InvalidGitRepositoryError, ValidationError, ValueError):
            raise WorkspaceError(not_one) from None
        if is_legacy(git_dir):
            raise WorkspaceError(
                f"{folder} keeps its history in its own .git, where the model's shell could write it "
                "(a run of an older cuda-agent): it cannot be continued; start a new run (copy "
                "model_new.py and kernels/ from it to start from its files)"
            )
        ws = cls(folder.resolve(), repo, record)
        ws._clear_stale_locks()
        ws.snapshot("snapshot: uncommitted work found on re-open")
        return ws

    def release(self) -> None:
        """Let another process run this run (the run ended here). The workspace's `.git` is left the harness's
        pointer first, whatever the model made of it: a person's git there runs nothing the model planted."""
        if self._run_lock is not None:
            with suppress(OSError):
                self.history.disarm()
        release_run(self._run_lock)
        self._run_lock = None

    def _clear_stale_locks(self) -> None:
        for lock in lock_files(self.history.git_dir):
            holder = lock_holder(lock, self.history.work_tree, self.history.git_dir)
            if holder is not None:
                raise WorkspaceError(
                    f"{lock} is held by a running process ({holder}): wait for it to end or stop "
                    "it, then resume again (another run or git on this workspace?)"
                )
            lock.unlink(missing_ok=True)
            self.removed_locks.append(lock)

    @property
    def staging_findings(self) -> list[str]:
        """What the last commit kept out of the history or replaced (a FIFO, a file over the size cap, a
        `.git` the shell made), one line each: for the tool that committed to tell the model."""
        return self.history.findings

    @property
    def candidate_dir(self) -> Path:
        """model_new.py and kernels/ live at the workspace root."""
        return self.root

    @property
    def task_path(self) -> Path:
        return self.root / "model.py"

    @property
    def task_ref(self) -> str:
        """`.../model.py::Class`, what load_task takes."""
        return f"{self.task_path}::{self.record.task.class_name}"

    def resolve(self, rel: str, *, for_write: bool = False) -> Path:
        """A path the model named, made absolute, or WorkspaceError if it leaves or breaks the sandbox."""
        return resolve_in(self.root, rel, for_write=for_write)

    def changed_protected(self) -> list[str]:
        """Protected files that differ from creation (changed, deleted, or replaced by a symlink)."""
        changed = [n for n, h in self.record.protected.items() if sha256_file(self.root / n) != h]
        first = self.history.show(self.history.root_commit(), RECORD)
        if sha256_file(self.root / RECORD, self.root) != hashlib.sha256(first).hexdigest():  # .cuda-agent/ a link too
            changed.append(RECORD)
        return changed

    def restore_protected(self) -> list[str]:
        """Put changed protected files back from the first commit (the tampering is committed first)."""
        if not (changed := self.changed_protected()):
            return []
        self.snapshot(f"snapshot: before restoring {', '.join(changed)}")
        for name in changed:
            target = self.root / name
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.is_dir():
                shutil.rmtree(target)
        self.history.checkout_files(self.history.root_commit(), changed)
        self.history.commit(f"restore protected files: {', '.join(changed)}")
        return changed

    def snapshot(self, message: str) -> str | None:
        return self.history.snapshot(message)

    def commit_version(self, verdict: Verdict, note: str = "") -> VersionInfo:
        """Commit everything as the next version with the verdict's metrics, recorded in the verdict
        ledger (run folder) under its content hash; `best` (display) moves to the ledger's best."""
        return self.history.commit_version(verdict, note)

    def versions(self) -> list[VersionInfo]:
        return self.history.versions()

    def same_files(self, rev: str) -> bool:
        """Whether model_new.py and kernels/ are now what commit `rev` holds."""
        return self.history.same_files(rev)

    def best(self) -> VersionInfo | None:
        """The verdict ledger's best correct version found in the history (never the `best` ref)."""
        return self.history.best()

    @property
    def run_folder(self) -> RunFolder:
        """The run folder this workspace is in (its trajectory, verdict ledger, report...)."""
        return RunFolder.around(self.root)

    @property
    def head(self) -> str:
        return self.history.head()
