"""`cuda-agent log RUN_DIR`: a run's history, read without running anything its workspace holds.

The versions are the verdict ledger's (what the harness evaluated and how each scored), then the
commits of the history kept beside the workspace (`<run>/workspace.git`), read by the harness's own
git: its environment and config, never the workspace's `.git` (which the model's shell could have
made a repository of its own, with hooks, a pager or filters) nor the user's git config."""

from __future__ import annotations

from pathlib import Path

import typer

from cuda_agent.cli_settings import fail


def log_command(
    run_dir: Path = typer.Argument(..., help="A run folder (what optimize wrote), or its workspace/."),
    commits: bool = typer.Option(True, "--commits/--no-commits", help="Also list the history's commits (git log)."),
) -> None:
    """Exit codes: 0 shown; 2 not a run (one line says what to give)."""
    import git
    from rich.console import Console

    from cuda_agent.filenames import shown
    from cuda_agent.run_folder import RunFolder
    from cuda_agent.workspace.git_dir import git_dir_of
    from cuda_agent.workspace.history import History
    from cuda_agent.workspace.ledger import LedgerError
    from cuda_agent.workspace.paths import WorkspaceError

    work_tree = run_dir if git_dir_of(run_dir).is_dir() else RunFolder(run_dir).workspace  # a workspace, or a run
    try:
        history = History.open(work_tree)
        versions, best = history.versions(), history.best()
        log = (
            history.git(
                "log", "--no-show-signature", "--no-color", "--format=%h %ad %s", "--date=short", "HEAD", ok=(0, 128)
            )
            if commits
            else ""
        )
    except (WorkspaceError, LedgerError) as e:
        fail(str(e))
    except git.GitCommandError as e:
        fail(f"{work_tree}'s history cannot be read ({str(e.stderr).strip()[:200]}): is it a run's workspace/?")
    out = Console(highlight=False, soft_wrap=True, markup=False, emoji=False)
    out.print(f"history: {history.git_dir}")
    out.print(f"versions (the verdict ledger, {history.ledger}): {len(versions) or 'none yet'}")
    for v in versions:
        timed = f"{v.time_ms:.4f} ms" if v.time_ms is not None else "not timed"
        out.print(f"  v{v.version}  {v.sha[:8]}  {v.status}  reward {v.reward}  {timed}  {v.subject}")
    out.print(f"best: v{best.version} ({best.sha[:8]}, reward {best.reward})" if best else "best: none correct yet")
    if commits:
        out.print("commits (git log; their trailers and the `best` branch are for display, the ledger is the record):")
        for line in log.splitlines():
            out.print(f"  {shown(line)}")
