"""`cuda-agent train sft|ppo`: the RFT warm-up on TRL and PPO on verl, over exported runs. The trainers
(trl, transformers, verl) are the optional extra `[train]`: every other command works without them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cuda_agent import install_hint
from cuda_agent.cli_settings import fail, fail_on

train_app = typer.Typer(no_args_is_help=True, add_completion=False,
                        help="Fine-tune a model on exported runs: sft (TRL) or ppo (verl).")


@train_app.command("sft")
def sft_command(
    data: Path = typer.Argument(..., help="An sft or rft export (cuda-agent export RUNS --format sft|rft --out FILE)."),
    model: str = typer.Option(..., "--model", "-m", help="A model folder, or a hub id already in the local cache (nothing is downloaded)."),
    gguf_file: Optional[str] = typer.Option(None, "--gguf-file", help="A GGUF file in --model's folder; dequantised to float32 to train."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the trained model, tokenizer and cuda_agent_sft.json."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", min=1, help="Optimizer steps (overrides --epochs)."),
    epochs: float = typer.Option(1.0, "--epochs", min=0.0, help="Passes over the data."),
    lr: float = typer.Option(1e-5, "--lr", help="Learning rate."),
    batch_size: int = typer.Option(1, "--batch-size", min=1, help="Runs per device per step."),
    grad_accum: int = typer.Option(1, "--grad-accum", min=1, help="Batches accumulated per optimizer step."),
    max_length: int = typer.Option(16384, "--max-length", min=16, help="Tokens per run (capped at the model's positions)."),
    long: str = typer.Option("truncate", "--long", help="A run longer than --max-length: truncate (train the turns before the cut) or skip."),
    tool_format: str = typer.Option("auto", "--tool-format", help="auto (native tool calls if the chat template shows them, else the text protocol), native or text."),
    seed: int = typer.Option(0, "--seed", help="Seed for initialisation, data order and dropout."),
    checkpointing: bool = typer.Option(True, "--gradient-checkpointing/--no-gradient-checkpointing", help="Recompute activations in the backward pass: less memory for long runs, ~20% slower."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty --out."),
) -> None:
    """Fine-tune on what the model wrote in exported runs (turns with weight 0 are context only) with TRL's SFTTrainer."""
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
    from cuda_agent.train.sft import ModelLoadError, NothingToTrain, SFTSettings, check_out_dir, train_sft
    from cuda_agent.train.sft_data import BadExport, read_export

    def say(lines: list[str]) -> None:
        for line in lines:
            console.print(line, highlight=False, markup=False, soft_wrap=True)

    with fail_on(FileNotFoundError, BadExport, FileExistsError):  # the cheap checks first: before a model is loaded
        rows = read_export(data)
        check_out_dir(out, overwrite)
    say([f"{data}: {len(rows)} run(s); model {model}" + (f" ({gguf_file})" if gguf_file else "")])
    settings = SFTSettings(model=model, out=out, gguf_file=gguf_file, max_steps=max_steps, epochs=epochs, lr=lr,
                           batch_size=batch_size, grad_accum=grad_accum, max_length=max_length, long=long,
                           tool_format=tool_format, seed=seed, gradient_checkpointing=checkpointing,
                           overwrite=overwrite)
    with fail_on(NothingToTrain, ModelLoadError):
        result = train_sft(data, settings, announce=lambda report: say(report.lines()))
    if result.max_length < max_length:
        console.print(f"max_length capped at {result.max_length}: the model has no more positions", highlight=False)
    say(result.lines())


@train_app.command("ppo")
def ppo_command(
    config: Path = typer.Option(..., "--config", "-c", help="Our PPO config, YAML or TOML: model, train_files (cuda-agent export --format verl), GPUs, rollout engine, episodes, overrides (docs/training.md)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Folder for the verl configuration (default: <config name>-verl/ beside the config file)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Write and check the verl configuration and print the launch command; run nothing."),
) -> None:
    """PPO (critic, GAE) on verl against the cuda-agent environment; defaults are the paper's recipe.

    Writes verl's configuration (checked against verl's own and the model's positions), prints the launch command, runs it."""
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
    console.print("launching verl (on a Ray cluster: run this on its head node; docs/training.md)", highlight=False,
                  soft_wrap=True)
    raise typer.Exit(subprocess.call(run.command))
