"""`cuda-agent config show`, and what every command does with settings: its flags (cli_flags.py
makes them from the settings' declarations) in, the resolved settings out (cuda_agent/settings.py),
or a one-line error and exit code 2."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer

config_app = typer.Typer(
    no_args_is_help=True, help="Settings: what a run would use here, and where each value comes from."
)


def fail(message: str, code: int = 2) -> NoReturn:
    """`error: message` on stderr, in one line, and exit `code` (2: bad usage)."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[red]error[/]: {escape(message)}", highlight=False, soft_wrap=True, emoji=False)
    raise typer.Exit(code)


@contextlib.contextmanager
def fail_on(*errors: type[Exception]) -> Iterator[None]:
    """Any of `errors` raised in the block: its message as fail's one line, exit code 2."""
    try:
        yield
    except errors as e:
        fail(str(e))


def model_or_exit(settings, script: Path | None, *, key: bool = True) -> None:
    """Stop with one line (exit code 2) when the model the run would make could not answer: a script
    that is missing or not a script, no API key for the model (run.model_problem). Before any run
    folder is made, so a wrong flag never leaves a failed run behind."""
    from cuda_agent.run import model_problem

    if problem := model_problem(settings, script, key=key):
        fail(problem)


def resolve_or_exit(flags: dict[str, Any]):
    """The settings with `flags` on top (nested by section, as SettingFlags.layer() gives them; None:
    not given). The device is eval.device as the layers
    give it, cuda:0 by default: only an explicit setting (--device cpu, CUDA_AGENT_EVAL__DEVICE=cpu,
    a config file) selects the CPU; `require_device` stops a command whose GPU is not there."""
    from cuda_agent.settings import SettingsError, resolve

    with fail_on(SettingsError):
        return resolve(flags)


def keep_run_device(resolved, run_dir: Path | None) -> None:
    """A resumed run (`run_dir`; None: a new run) keeps the device its header names, unless a layer (a
    flag, the environment, a file) chose one: a CPU run resumed without --device cpu stays on the CPU."""
    from cuda_agent.run_folder import RunFolder
    from cuda_agent.trajectory import read_trajectory

    if run_dir is None or "eval.device" in resolved.origins:
        return
    # unreadable: the default, and open_run says what is wrong with the folder
    with contextlib.suppress(OSError, ValueError, IndexError, KeyError, AttributeError, TypeError):
        resolved.settings.eval.device = read_trajectory(RunFolder(run_dir).trajectory)[0].config["eval"]["device"]


# the README's route to a first verdict without a GPU: the example's host-only candidate (tests read it there)
CPU_EXAMPLE = (
    "cuda-agent eval examples/scale_add_small/model.py --candidate examples/scale_add_small/candidate_cpu "
    "--device cpu --no-compile-baseline"
)
NO_GPU = (
    "no CUDA GPU is visible to torch: run `cuda-agent doctor` to see why, or pass --device cpu to run "
    f"host-only kernels (nothing a GPU does is run or timed), e.g. from a clone's root: `{CPU_EXAMPLE}`"
)


def require_device(device: str) -> None:
    """Stop with one line (exit code 2) unless `device` is cpu or a GPU torch can use: without a GPU
    nothing falls back to the CPU by itself, where a candidate's kernels would never run."""
    if device == "cpu":
        return
    if device != "cuda" and not (device.startswith("cuda:") and device[5:].isdigit()):
        fail(f"device {device!r}: give cuda:N (a GPU index) or cpu")
    import torch

    if not torch.cuda.is_available():
        fail(NO_GPU)
    n = torch.cuda.device_count()
    if device != "cuda" and int(device[5:]) >= n:
        fail(f"device {device}: torch sees {n} GPU(s) (cuda:0..cuda:{n - 1}); pick one of them")


WORKSPACES_ARE_REPOSITORIES = "each run's workspace is a git repository of its own"


def out_folder_problem(out: Path, why: str = WORKSPACES_ARE_REPOSITORIES) -> str | None:
    """Why `out` cannot hold run folders, or None: each run's workspace is a git repository, never one
    nested in the user's tracked tree, and a batch's results are output, not source; so `out` is outside
    any git work tree or in a folder it ignores. `why`: the reason the message gives."""
    import subprocess

    from cuda_agent.workspace.paths import enclosing_git_root

    if Path(out).exists() and not Path(out).is_dir():
        return f"--out {out} is a file: give a folder (a new one, or one this command wrote before)"
    if (owner := enclosing_git_root(out)) is None:
        return None
    inside = Path(out).resolve().relative_to(owner)
    if inside != Path("."):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):  # the trailing /: a folder, existing or not
            if (
                subprocess.run(
                    ["git", "-C", str(owner), "check-ignore", "-q", "--", f"{inside.as_posix()}/"],
                    capture_output=True,
                    timeout=30,
                ).returncode
                == 0
            ):
                return None
    ignore = f", or list {inside.as_posix()}/ in {owner / '.gitignore'}" if inside != Path(".") else ""
    return (
        f"{out} is inside the git repository at {owner}, which does not ignore it: {why}; pass --out DIR "
        f"outside it{ignore}"
    )


@config_app.command("show")
def show_command(
    json_out: bool = typer.Option(False, "--json", help="Print JSON: values and origins."),
    project_dir: Optional[Path] = typer.Option(
        None, "--project-dir", help="Where to look for cuda-agent.toml (default: here)."
    ),
) -> None:
    """Every setting with its value, the layer it came from (default < user file < project file
    (cuda-agent.toml) < environment (CUDA_AGENT_*, nested with __) < flag) and its flag, if it has one."""
    from rich.console import Console
    from rich.table import Table

    from cuda_agent.flags import flagged
    from cuda_agent.settings import PROJECT_FILE, Settings, SettingsError, resolve, user_file

    with fail_on(SettingsError):
        resolved = resolve(project_dir=project_dir)
    flags = {s.path: s.option for s in flagged(Settings)}  # the commands that take each: their --help
    if json_out:
        print(
            json.dumps(
                {"values": resolved.settings.model_dump(mode="json"), "origins": resolved.origins, "flags": flags},
                indent=1,
            )
        )
        return
    project_file = (project_dir or Path.cwd()) / PROJECT_FILE
    table = Table(
        "setting", "value", "from", "flag", title=f"settings (user file {user_file()}, project file {project_file})"
    )
    for name, value, origin in resolved.rows():
        table.add_row(
            name, json.dumps(value), origin, flags.get(name, ""), style=None if origin == "default" else "bold"
        )
    Console().print(table)
