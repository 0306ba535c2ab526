"""`cuda-agent export RUNS... --format sft|rft|verl --out FILE`: runs -> training data
(cuda_agent/train/export.py says what each format holds and how marked turns are handled)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from cuda_agent import install_hint
from cuda_agent.cli_settings import fail
from cuda_agent.run_folder import TRAJECTORY


def export_command(
    runs: List[Path] = typer.Argument(
        ..., help=f"Run folders, batch folders or folders of runs (searched for {TRAJECTORY})."
    ),
    fmt: str = typer.Option(
        ...,
        "--format",
        "-f",
        help="sft (chat JSONL, every run), rft (chat JSONL, the best run per task) or verl (parquet of tasks).",
    ),
    out: Path = typer.Option(..., "--out", "-o", help="The file to write (.jsonl for sft/rft, .parquet for verl)."),
    min_reward: Optional[int] = typer.Option(
        None, "--min-reward", help="Leave out runs whose best reward is below this (sft, rft; rft defaults to 2)."
    ),
    drop_marked: bool = typer.Option(
        False,
        "--drop-marked",
        help=(
            "Leave out runs with turns a person edited, a script wrote, or a person's messages (default: kept with "
            "weight 0)."
        ),
    ),
    drop_trimmed: bool = typer.Option(
        False,
        "--drop-trimmed",
        help=(
            "Leave out runs whose context was trimmed (default: kept, shortened as the model was shown them, the "
            "steps listed in metadata)."
        ),
    ),
    include_unfinished: bool = typer.Option(
        False, "--include-unfinished", help="Also export runs without a closing record (killed, still running)."
    ),
    include_external: bool = typer.Option(
        False,
        "--include-external",
        help=(
            "Keep runs an MCP client drove (cuda-agent mcp) in sft/rft as demonstrations: each of the client's "
            'turns is marked "external": true and holds only its tool calls (content null), and is trained as those '
            "calls (default: such runs are left out, with that reason)."
        ),
    ),
) -> None:
    """Counts of what was written and what was left out, and why, are printed at the end. Exit codes: 0 written;
    2 bad usage (a path that does not exist, an unknown format); 3 nothing to write (no run found, or every
    run left out, in any format): no file is written and one line says why."""
    from rich.console import Console

    from cuda_agent.train.export import export

    if fmt not in ("sft", "rft", "verl"):
        fail(f"--format {fmt!r}: use sft, rft or verl")
    if fmt == "rft" and min_reward is None:
        min_reward = 2  # RFT keeps good trajectories: faster than eager at least
    try:
        report = export(
            runs,
            fmt,
            out,
            min_reward=min_reward,
            drop_marked=drop_marked,
            drop_trimmed=drop_trimmed,
            include_unfinished=include_unfinished,
            include_external=include_external,
        )
    except FileNotFoundError as e:
        fail(str(e))
    except ImportError:
        fail(f"--format verl writes parquet: {install_hint('train')} (pyarrow)")
    if report.written == 0:  # every format, whatever left it empty: no file written, one line saying why, exit 3
        kept = " (the file already there is left as it was)" if out.exists() else ""
        fail(f"nothing to export, {out} not written{kept}: {report.why_empty()}", code=3)
    console = Console(stderr=True)
    for line in [*report.lines(), f"wrote {out}"]:
        console.print(line, highlight=False, markup=False)
