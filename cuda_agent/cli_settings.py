"""`cuda-agent config show`, and what every command does with settings: flags in, the resolved
settings out (cuda_agent/settings.py), or a one-line error and exit code 2."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer

config_app = typer.Typer(no_args_is_help=True, help="Settings: what a run would use here, and where each value comes from.")


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


def eval_flags(no_compile: bool = False, no_sandbox: bool = False, **given: Any) -> dict[str, Any]:
    """`[eval]` as a command's flags give it: only what was given (None is not given), the two
    switches as the values they stand for."""
    flags = {**given, "baselines": ["eager"] if no_compile else None, "sandbox": False if no_sandbox else None}
    return {k: v for k, v in flags.items() if v is not None}


def run_flags(*, model: str | None, api_base: str | None, max_steps: int | None, max_cost: float | None,
              max_tokens: int | None, max_wall: float | None, target_speedup: float | None, allow_shell: bool,
              no_compile: bool, no_sandbox: bool, out: Path | None = None, max_calls_per_turn: int | None = None,
              llm: dict[str, Any] | None = None, **eval: Any) -> dict[str, Any]:
    """The settings the flags optimize and batch share give (see the options below); `llm`: the model
    options (llm_flags); `eval`: more of `[eval]`."""
    return {"model": model, "api_base": api_base, "out": out, "llm": llm or {},
            "limits": {"max_steps": max_steps, "max_cost": max_cost, "max_tokens": max_tokens,
                       "max_wall_s": max_wall, "target_speedup": target_speedup,
                       "max_calls_per_turn": max_calls_per_turn},
            "eval": eval_flags(no_compile, no_sandbox, **eval), "tools": {"allow_shell": True if allow_shell else None}}


def llm_flags(tools: str | None = None, context_tokens: int | None = None, temperature: float | None = None,
              max_output_tokens: int | None = None, price_in: float | None = None,
              price_out: float | None = None, api_key_env: str | None = None) -> dict[str, Any]:
    """`[llm]` as the model-option flags (TOOLS ... API_KEY_ENV below) give it."""
    if tools is not None and tools not in ("native", "text", "auto"):
        fail(f"--tools {tools}: give native, text or auto")
    return {"tools": tools, "context_tokens": context_tokens, "temperature": temperature,
            "max_output_tokens": max_output_tokens, "price_in": price_in, "price_out": price_out,
            "api_key_env": api_key_env}


def model_or_exit(settings, script: Path | None, *, key: bool = True) -> None:
    """Stop with one line (exit code 2) when the model the run would make could not answer: a script
    that is missing or not a script, no API key for the model (run.model_problem). Before any run
    folder is made, so a wrong flag never leaves a failed run behind."""
    from cuda_agent.run import model_problem

    if problem := model_problem(settings, script, key=key):
        fail(problem)


def resolve_or_exit(flags: dict[str, Any]):
    """The settings with `flags` on top (None: not given). The device is eval.device as the layers
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
CPU_EXAMPLE = ("cuda-agent eval examples/scale_add_small/model.py --candidate examples/scale_add_small/candidate_cpu "
               "--device cpu --no-compile-baseline")
NO_GPU = ("no CUDA GPU is visible to torch: run `cuda-agent doctor` to see why, or pass --device cpu to run "
          f"host-only kernels (nothing a GPU does is run or timed), e.g. from a clone's root: `{CPU_EXAMPLE}`")


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
            if subprocess.run(["git", "-C", str(owner), "check-ignore", "-q", "--", f"{inside.as_posix()}/"],
                              capture_output=True, timeout=30).returncode == 0:
                return None
    ignore = f", or list {inside.as_posix()}/ in {owner / '.gitignore'}" if inside != Path(".") else ""
    return (f"{out} is inside the git repository at {owner}, which does not ignore it: {why}; pass --out DIR "
            f"outside it{ignore}")


@config_app.command("show")
def show_command(
    json_out: bool = typer.Option(False, "--json", help="Print JSON: values and origins."),
    project_dir: Optional[Path] = typer.Option(None, "--project-dir", help="Where to look for cuda-agent.toml (default: here)."),
) -> None:
    """Every setting with its value and the layer it came from: default < user file < project file
    (cuda-agent.toml) < environment (CUDA_AGENT_*, nested with __) < flag."""
    from rich.console import Console
    from rich.table import Table

    from cuda_agent.settings import PROJECT_FILE, SettingsError, resolve, user_file

    with fail_on(SettingsError):
        resolved = resolve(project_dir=project_dir)
    if json_out:
        print(json.dumps({"values": resolved.settings.model_dump(mode="json"), "origins": resolved.origins}, indent=1))
        return
    project_file = (project_dir or Path.cwd()) / PROJECT_FILE
    table = Table("setting", "value", "from", title=f"settings (user file {user_file()}, project file {project_file})")
    for name, value, origin in resolved.rows():
        table.add_row(name, json.dumps(value), origin, style=None if origin == "default" else "bold")
    Console().print(table)


# The flags optimize, mcp and batch share, declared once; each is a setting too (docs/settings.md), so
# None means "not given": the files and CUDA_AGENT_* decide. A batch's limits are per task (per_task).
MODEL = typer.Option(None, "--model", "-m", help="litellm model name, e.g. openai/gpt-5, anthropic/claude-sonnet-4-5, hosted_vllm/qwen (setting: model).")
API_BASE = typer.Option(None, "--api-base", help="OpenAI-compatible server URL (vLLM, SGLang, llama.cpp, Ollama) (setting: api_base).")
MAX_STEPS = typer.Option(None, "--max-steps", min=1, help="Steps at most: each tool call that runs is one step, a model reply that runs none is one; no tool call starts past it (setting: limits.max_steps; default 50).")
MAX_COST = typer.Option(None, "--max-cost", help="Dollars at most over priced turns (setting: limits.max_cost).")
MAX_TOKENS = typer.Option(None, "--max-tokens", help="Prompt + completion tokens at most (setting: limits.max_tokens).")
MAX_WALL = typer.Option(None, "--max-wall", help="Seconds of agent wall time at most: a deadline; no model request lasts past it (its timeout is the time left, retries included) and no tool call starts past it; the re-verification at the end comes after it (setting: limits.max_wall_s).")
MAX_CALLS = typer.Option(None, "--max-calls-per-turn", min=1, help="Tool calls of one model reply that run; the rest are answered as skipped and never run (setting: limits.max_calls_per_turn; default 8).")
TARGET_SPEEDUP = typer.Option(None, "--target-speedup", help="Stop once the best version is this much faster than torch.compile (setting: limits.target_speedup).")
ALLOW_SHELL = typer.Option(False, "--allow-shell", help="Give the model a shell tool, in the jail (setting: tools.allow_shell).")
NO_SANDBOX = typer.Option(False, "--no-sandbox", help="Run candidates and the shell without the jail (when bubblewrap cannot run here); every verdict records it (setting: eval.sandbox).")
MEMORY_BUDGET = typer.Option(None, "--memory-budget", min=0.01, help="GiB of GPU memory one evaluation may use, all its processes (default: what the GPU has free); a task that cannot fit is unscorable before any candidate runs (setting: eval.memory_budget_gib).")
# how the model is called ([llm] in the settings)
TOOLS = typer.Option(None, "--tools", help="How tool calls are exchanged: native (the provider's function calling), text (an ```action block in the reply, for models and servers without it), auto (native when litellm's table says the model has it) (setting: llm.tools; default auto).", metavar="native|text|auto")
CONTEXT_TOKENS = typer.Option(None, "--context-tokens", min=512, help="The model's context window in tokens, e.g. a local server's (llama.cpp: its --n_ctx); old observations are trimmed to fit it (setting: llm.context_tokens; default: what a server at --api-base reports in /v1/models, else litellm's table).")
TEMPERATURE = typer.Option(None, "--temperature", min=0.0, max=2.0, help="Sampling temperature (setting: llm.temperature; default: the provider's).")
MAX_OUTPUT_TOKENS = typer.Option(None, "--max-output-tokens", min=1, help="Tokens one reply may take (setting: llm.max_output_tokens; default: the provider's).")
PRICE_IN = typer.Option(None, "--price-in", min=0.0, help="USD per million prompt tokens, with --price-out (setting: llm.price_in). Without them a turn is priced from litellm's table only at the provider's own endpoint; with --api-base elsewhere it is unpriced.")
PRICE_OUT = typer.Option(None, "--price-out", min=0.0, help="USD per million completion tokens, with --price-in (setting: llm.price_out).")
API_KEY_ENV = typer.Option(None, "--api-key-env", metavar="VARIABLE", help="The environment variable that holds the model's API key, e.g. MY_GATEWAY_KEY (setting: llm.api_key_env; default: the provider's usual one, e.g. OPENAI_API_KEY). Its name only is recorded, never its value.")
NO_COMPILE = typer.Option(False, "--no-compile-baseline", help="Skip the torch.compile baseline (setting: eval.baselines).")


def per_task(option):
    """A limit's option as a batch declares it: the same flag and setting, said to count per task."""
    import copy

    batch = copy.copy(option)
    batch.help = f"Per task: {option.help[0].lower()}{option.help[1:]}"
    return batch
