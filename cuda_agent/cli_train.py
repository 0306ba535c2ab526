"""`cuda-agent train sft|grpo|ppo`: the RFT warm-up (TRL's SFTTrainer) over exported runs, GRPO on one
machine (TRL's GRPOTrainer, rollouts in the agent's own environment) and PPO on a cluster (verl). The
trainers (trl, transformers, verl) are the optional extra `[train]`: every other command works without them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cuda_agent import install_hint
from cuda_agent.cli_flags import SettingFlags, setting_flags
from cuda_agent.cli_settings import fail, fail_on

train_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Train a model: sft on exported runs (TRL), grpo on one GPU or the CPU (TRL), ppo on a cluster (verl).",
)


@train_app.command("sft")
def sft_command(
    data: Path = typer.Argument(..., help="An sft or rft export (cuda-agent export RUNS --format sft|rft --out FILE)."),
    model: str = typer.Option(
        ...,
        "--model",
        "-m",
        help=(
            "A model folder, a hub id already in the local cache (nothing is downloaded), or tiny: a one-layer model "
            "built here with random weights and SmolLM2's tokenizer (tests, a first try on a CPU)."
        ),
    ),
    gguf_file: Optional[str] = typer.Option(
        None, "--gguf-file", help="A GGUF file in --model's folder; dequantised to float32 to train."
    ),
    out: Path = typer.Option(
        ..., "--out", "-o", help="Folder for the trained model, tokenizer and cuda_agent_sft.json."
    ),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", min=1, help="Optimizer steps (overrides --epochs)."),
    epochs: float = typer.Option(1.0, "--epochs", min=0.0, help="Passes over the data."),
    lr: float = typer.Option(1e-5, "--lr", help="Learning rate."),
    batch_size: int = typer.Option(1, "--batch-size", min=1, help="Runs per device per step."),
    grad_accum: int = typer.Option(1, "--grad-accum", min=1, help="Batches accumulated per optimizer step."),
    max_length: int = typer.Option(
        16384, "--max-length", min=16, help="Tokens per run (capped at the model's positions)."
    ),
    long: str = typer.Option(
        "truncate", "--long", help="A run longer than --max-length: truncate (train the turns before the cut) or skip."
    ),
    tool_format: str = typer.Option(
        "auto",
        "--tool-format",
        help="auto (native tool calls if the chat template shows them, else the text protocol), native or text.",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed for initialisation, data order and dropout."),
    checkpointing: bool = typer.Option(
        True,
        "--gradient-checkpointing/--no-gradient-checkpointing",
        help="Recompute activations in the backward pass: less memory for long runs, ~20% slower.",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty --out."),
) -> None:
    """Fine-tune on what the model wrote in exported runs (turns with weight 0 are context only) with TRL's \
SFTTrainer."""
    from rich.console import Console

    console = Console(stderr=True)
    if long not in ("truncate", "skip"):
        fail(f"--long {long!r}: use truncate or skip")
    if tool_format not in ("auto", "native", "text"):
        fail(f"--tool-format {tool_format!r}: use auto, native or text")
    try:
        import datasets  # noqa: F401
        import transformers  # noqa: F401
        import trl  # noqa: F401
    except ImportError as e:
        fail(f"train sft needs TRL, transformers and datasets ({e.name or e} is missing): {install_hint('train')}")
    from cuda_agent.train.models import ModelLoadError
    from cuda_agent.train.sft import NothingToTrain, SFTSettings, check_out_dir, train_sft
    from cuda_agent.train.sft_data import BadExport, read_export

    def say(lines: list[str]) -> None:
        for line in lines:
            console.print(line, highlight=False, markup=False, soft_wrap=True)

    with fail_on(FileNotFoundError, BadExport, FileExistsError):  # the cheap checks first: before a model is loaded
        rows = read_export(data)
        check_out_dir(out, overwrite)
    say([f"{data}: {len(rows)} run(s); model {model}" + (f" ({gguf_file})" if gguf_file else "")])
    settings = SFTSettings(
        model=model,
        out=out,
        gguf_file=gguf_file,
        max_steps=max_steps,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        grad_accum=grad_accum,
        max_length=max_length,
        long=long,
        tool_format=tool_format,
        seed=seed,
        gradient_checkpointing=checkpointing,
        overwrite=overwrite,
    )
    with fail_on(NothingToTrain, ModelLoadError):
        result = train_sft(data, settings, announce=lambda report: say(report.lines()))
    if result.max_length < max_length:
        console.print(f"max_length capped at {result.max_length}: the model has no more positions", highlight=False)
    say(result.lines())


@train_app.command("grpo")
@setting_flags("eval.device", "eval.baselines")
def grpo_command(
    tasks: str = typer.Argument(
        ...,
        help=(
            "A task folder (every task below it, as batch finds them: KernelBench's layout, examples/) or one task "
            "file (file.py or file.py::Class)."
        ),
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the log, plot, checkpoints and the trained model."),
    model: Optional[str] = typer.Option(
        None,
        "--model",
        "-m",
        help=(
            "The policy: a model folder, a hub id already in the local cache, or tiny (a one-layer model built here: "
            "tests, a CPU). Its chat template must show tool calls."
        ),
    ),
    from_checkpoint: Optional[str] = typer.Option(
        None,
        "--from-checkpoint",
        help=(
            "Start from this model folder instead: the --out of `train sft` (the RFT warm-up); with --model, it must "
            "have been trained from it."
        ),
    ),
    max_steps: Optional[int] = typer.Option(
        None, "--max-steps", min=1, help="Optimizer steps in all (a resumed run goes on to this step). Default 100."
    ),
    resume: bool = typer.Option(
        False,
        "--resume",
        help=(
            "Continue the run in --out from its last checkpoint, with its settings (--max-steps, --max-turns, "
            "--max-completion-length, --save-every and --keep-workspaces may change)."
        ),
    ),
    flags: SettingFlags = SettingFlags(),  # --device (where evaluations run), --no-compile-baseline
    num_generations: Optional[int] = typer.Option(
        None,
        "--num-generations",
        "-g",
        min=2,
        help="Rollouts per task per step: GRPO's group, whose rewards are compared. Default 4.",
    ),
    tasks_per_step: Optional[int] = typer.Option(
        None, "--tasks-per-step", min=1, help="Tasks per optimizer step. Default 1."
    ),
    lr: Optional[float] = typer.Option(None, "--lr", help="Learning rate. Default 1e-6."),
    max_turns: Optional[int] = typer.Option(
        None, "--max-turns", min=1, help="Tool calls per rollout (the episode ends there). Default 30."
    ),
    max_completion_length: Optional[int] = typer.Option(
        None,
        "--max-completion-length",
        min=16,
        help="Tokens per rollout after the prompt: the model's turns and the tools' observations. Default 24576.",
    ),
    temperature: Optional[float] = typer.Option(
        None, "--temperature", min=0.0, help="Sampling temperature. Default 1.0."
    ),
    beta: Optional[float] = typer.Option(
        None, "--beta", min=0.0, help="KL penalty to the starting policy (0: none, no reference model held). Default 0."
    ),
    save_every: Optional[int] = typer.Option(
        None, "--save-every", min=1, help="A checkpoint every N steps (and at the end, and on Ctrl-C). Default 10."
    ),
    seed: Optional[int] = typer.Option(
        None, "--seed", help="Seed for the tiny model's weights, sampling and data order. Default 0."
    ),
    task_filter: Optional[str] = typer.Option(None, "--filter", help="Only tasks whose id matches this regex."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="At most this many tasks."),
    keep_workspaces: Optional[bool] = typer.Option(
        None,
        "--keep-workspaces/--no-keep-workspaces",
        help=(
            "Keep each rollout's run folder (its workspace and verdict ledger) in OUT/episodes/. Default: deleted "
            "once its reward is read."
        ),
    ),
    allow_shell: Optional[bool] = typer.Option(
        None, "--allow-shell/--no-shell", help="Offer the shell tool (in the jail), as optimize --allow-shell."
    ),
    checkpointing: Optional[bool] = typer.Option(
        None,
        "--gradient-checkpointing/--no-gradient-checkpointing",
        help="Recompute activations in the backward pass: less memory for long rollouts. Default on.",
    ),
) -> None:
    """GRPO on one machine with TRL, rollouts in the agent's own environment, rewarded by the judge.

    Each step runs --tasks-per-step tasks x --num-generations rollouts; a rollout is a multi-turn episode
    with the agent's tools, workspace, jail and judge, and its reward is the milestone reward of the best
    correct version its verdict ledger records (-1 when none). Writes log.jsonl, episodes.jsonl and
    reward.png to --out, checkpoints to --out/checkpoints. Ctrl-C stops after the current step with a
    checkpoint (exit code 130; --resume continues). Evaluations run on --device (the policy trains on
    the first visible GPU, else the CPU); --no-compile-baseline leaves the reward's torch.compile
    milestone out. Exit codes: 0 trained, 2 bad usage."""
    from rich.console import Console

    from cuda_agent.cli_settings import require_device, resolve_or_exit

    console = Console(stderr=True)
    try:
        import datasets  # noqa: F401
        import transformers  # noqa: F401
        import trl  # noqa: F401
    except ImportError as e:
        fail(f"train grpo needs TRL, transformers and datasets ({e.name or e} is missing): {install_hint('train')}")
    from cuda_agent.progress import Progress
    from cuda_agent.train.grpo import GRPOSettings, GRPOSetupError, settings_for_resume, train_grpo
    from cuda_agent.train.grpo_data import NoTasks
    from cuda_agent.train.models import ModelLoadError

    given = {
        "tasks": tasks,
        "model": model,
        "from_checkpoint": from_checkpoint,
        "max_steps": max_steps,
        "num_generations": num_generations,
        "tasks_per_step": tasks_per_step,
        "lr": lr,
        "max_turns": max_turns,
        "max_completion_length": max_completion_length,
        "temperature": temperature,
        "beta": beta,
        "save_every": save_every,
        "seed": seed,
        "filter": task_filter,
        "limit": limit,
        "keep_workspaces": keep_workspaces,
        "allow_shell": allow_shell,
        "gradient_checkpointing": checkpointing,
    }
    with fail_on(GRPOSetupError):
        if resume:
            settings = settings_for_resume(out, given)
        else:
            settings = GRPOSettings(out=out, **{k: v for k, v in given.items() if v is not None})
    eval_config = resolve_or_exit(flags.layer()).settings.eval
    require_device(eval_config.device)

    def say(line: str) -> None:
        console.print(line, highlight=False, markup=False, soft_wrap=True)

    with fail_on(GRPOSetupError, NoTasks, FileExistsError, ModelLoadError):
        result = train_grpo(settings, eval_config, resume=resume, progress=Progress(console), say=say)
    for line in result.lines():
        say(line)
    if result.stopped:
        raise typer.Exit(130)


@train_app.command("ppo")
def ppo_command(
    config: Path = typer.Option(
        ...,
        "--config",
        "-c",
        help=(
            "Our PPO config, YAML or TOML: model, train_files (cuda-agent export --format verl), GPUs, rollout "
            "engine, episodes, overrides (docs/training.md)."
        ),
    ),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        "-o",
        help="Folder for the verl configuration (default: <config name>-verl/ beside the config file).",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Write and check the verl configuration and print the launch command; run nothing."
    ),
) -> None:
    """PPO (critic, GAE) on verl against the cuda-agent environment; defaults are the paper's recipe.

    Writes verl's configuration (checked against verl's own and the model's positions), prints the launch \
command, runs it."""
    import importlib.util
    import subprocess

    from rich.console import Console

    console = Console(stderr=True)
    if importlib.util.find_spec("verl") is None:
        fail(f"train ppo needs verl: {install_hint('train')}")
    from cuda_agent.train.ppo_config import PPOConfigError, load_config
    from cuda_agent.train.verl_config import write_run

    with fail_on(PPOConfigError):
        run = write_run(load_config(config), out if out is not None else config.parent / f"{config.stem}-verl")
    for line in [f"wrote {f}" for f in run.files] + run.notes:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    typer.echo(run.command_line())
    if dry_run:
        return
    console.print(
        "launching verl (on a Ray cluster: run this on its head node; docs/training.md)",
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(subprocess.call(run.command))
