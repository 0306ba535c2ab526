"""The workspace's git history: every evaluation is a commit with its metrics as trailers, and the
branch `best` points at the best correct version so far. `git log` is the optimisation history."""

from __future__ import annotations

from pathlib import Path

import git

from ..eval.verdict import Verdict
from .trailers import LOG_FORMAT, VersionInfo, parse_log, version_message

IDENTITY = "cuda-agent"
MAIN = "main"
BEST_REF = "refs/heads/best"


def init_repo(root: Path) -> git.Repo:
    """`git init` with settings that make commits work anywhere: a local identity, no signing, no hooks."""
    repo = git.Repo.init(root, initial_branch=MAIN)
    with repo.config_writer() as cfg:
        cfg.set_value("user", "name", IDENTITY)
        cfg.set_value("user", "email", f"{IDENTITY}@localhost")
        cfg.set_value("commit", "gpgsign", "false")
        # a global core.hooksPath would otherwise run the user's hooks on our commits
        cfg.set_value("core", "hooksPath", str(Path(repo.git_dir) / "hooks"))
    return repo


class History:
    """Commits and reads versions of one workspace repository."""

    def __init__(self, repo: git.Repo):
        self.repo = repo
        # Every git command names this repository: were the workspace's .git gone (or its folder
        # inside another work tree), git's upward search would otherwise commit to whatever
        # repository encloses it. Seen once: a version commit landed in the project's own repo.
        repo.git.update_environment(GIT_DIR=str(Path(repo.git_dir).resolve()),
                                    GIT_WORK_TREE=str(Path(repo.working_tree_dir).resolve()))

    def commit(self, message: str, *, allow_empty: bool = False) -> str | None:
        """`git add -A` (honouring .gitignore) and commit; None when there was nothing to commit."""
        self.repo.git.add("-A")
        if not allow_empty and not self._staged():
            return None
        args = ["-q", "--no-verify", "--cleanup=whitespace", "-m", message]
        self.repo.git.commit(*args, *(["--allow-empty"] if allow_empty else []))
        return self.repo.head.commit.hexsha

    def snapshot(self, message: str) -> str | None:
        """Commit uncommitted work (new, changed or deleted files) so nothing is lost; None if clean."""
        if not self.repo.is_dirty(untracked_files=True):
            return None
        return self.commit(message)

    def commit_version(self, verdict: Verdict, note: str = "") -> VersionInfo:
        """Commit the work tree as the next version (even if unchanged) and move `best` if it is better."""
        number = max((v.version for v in self.versions()), default=0) + 1
        sha = self.commit(version_message(verdict, number, note), allow_empty=True)
        assert sha is not None  # allow_empty always commits
        new = self.info(sha)
        assert new is not None  # its trailers were just written
        if new.better_than(self.best()):
            self.repo.git.update_ref("-m", f"best: v{number}", BEST_REF, sha)
        return new

    def versions(self) -> list[VersionInfo]:
        """Every version on the current branch, oldest first."""
        return parse_log(self.repo.git.log("--reverse", f"--format={LOG_FORMAT}", "HEAD"))

    def info(self, rev: str) -> VersionInfo | None:
        """The version recorded by one commit, or None when it is not a version (task, snapshot)."""
        found = parse_log(self.repo.git.log("-1", f"--format={LOG_FORMAT}", rev))
        return found[0] if found else None

    def best(self) -> VersionInfo | None:
        try:
            sha = self.repo.git.rev_parse("--verify", "-q", BEST_REF)
        except git.GitCommandError:
            return None
        return self.info(sha)

    def root_commit(self) -> str:
        """The first commit ("task: <name>"): the reference copy of every protected file."""
        roots = self.repo.git.rev_list("--max-parents=0", "HEAD").split()
        return roots[-1]

    def show(self, rev: str, path: str) -> bytes:
        """A file's bytes at a commit (not the work tree's copy, which the model may have changed)."""
        return self.repo.git.show(f"{rev}:{path}", stdout_as_string=False, strip_newline_in_stdout=False)

    def checkout_files(self, rev: str, paths: list[str]) -> None:
        self.repo.git.checkout(rev, "--", *paths)

    def _staged(self) -> bool:
        try:
            self.repo.git.diff("--cached", "--quiet")
        except git.GitCommandError:
            return True  # --quiet exits 1 when something is staged (also before the first commit)
        return False
