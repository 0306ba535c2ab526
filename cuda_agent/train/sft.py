"""`cuda-agent train sft`: the RFT warm-up, TRL's SFTTrainer over an sft/rft export.

The data side (what is trained, in which chat form, how long runs are cut) is sft_data.py and
sft_tokens.py; this module loads the model, configures TRL, trains and saves. TRL, transformers and
datasets are imported inside the functions: the optional extra `[train]`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from cuda_agent.train.models import ModelLoadError, load_model, precision
from cuda_agent.train.sft_data import read_export
from cuda_agent.train.sft_tokens import DataReport, LongPolicy, ToolFormat, build_dataset

SUMMARY = "cuda_agent_sft.json"  # what was trained, on what, with which settings: beside the weights


class NothingToTrain(ValueError):
    pass


@dataclass
class SFTSettings:
    model: str  # a folder (save_pretrained or a hub snapshot) or a hub id already in the local cache
    out: Path
    gguf_file: str | None = None  # a GGUF file in `model`'s folder, dequantised on load (transformers + gguf)
    max_steps: int | None = None  # optimizer steps; None: `epochs` passes over the data
    epochs: float = 1.0
    lr: float = 1e-5
    batch_size: int = 1
    grad_accum: int = 1
    max_length: int = 16384  # tokens per run; agent runs are long (the system prompt alone is ~8k)
    long: LongPolicy = "truncate"
    tool_format: ToolFormat = "auto"
    seed: int = 0
    gradient_checkpointing: bool = True  # long sequences: recompute activations rather than hold them
    overwrite: bool = False


@dataclass
class SFTResult:
    steps: int
    final_loss: float | None  # the last logged step's loss
    mean_loss: float | None  # over the whole run (TRL's training_loss)
    out_dir: Path
    seconds: float
    precision: str
    max_length: int
    data: DataReport = field(default_factory=DataReport)

    def lines(self) -> list[str]:
        loss = "n/a" if self.final_loss is None else f"{self.final_loss:.4f}"
        mean = "" if self.mean_loss is None else f" (mean {self.mean_loss:.4f})"
        return [
            f"trained {self.steps} step(s) in {self.seconds:.1f} s ({self.precision}), final loss {loss}{mean}",
            f"saved model and tokenizer to {self.out_dir}",
        ]


def check_out_dir(out: Path, overwrite: bool) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise FileExistsError(
            f"{out} exists and is not empty: pass --overwrite to write into it, or pick another --out"
        )


def train_sft(
    data: Path,
    settings: SFTSettings,
    *,
    model=None,
    tokenizer=None,
    announce: Callable[[DataReport], None] | None = None,
) -> SFTResult:
    """Train on the export at `data`; `model`/`tokenizer` already loaded skip `load_model`.
    `announce` sees the data report before the first step."""
    from trl import SFTConfig, SFTTrainer

    start = time.monotonic()
    out = Path(settings.out)
    check_out_dir(out, settings.overwrite)
    rows = read_export(data)
    if model is None or tokenizer is None:
        model, tokenizer = load_model(settings.model, settings.gguf_file, seed=settings.seed)
    if not tokenizer.chat_template:
        raise ModelLoadError(
            f"{settings.model} has no chat template: train a chat (instruct) model, or give its tokenizer one"
        )
    # no longer than the model's position table: past it a model computes nonsense, or fails
    window = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    max_length = min(settings.max_length, window) if window else settings.max_length
    dataset, report = build_dataset(
        rows, tokenizer, max_length=max_length, long=settings.long, tool_format=settings.tool_format
    )
    if report.used == 0:
        why = "; ".join(f"{reason} ({n})" for reason, n in report.skipped.items())
        raise NothingToTrain(f"no run left to train on: {why}")
    if announce:
        announce(report)
    prec = precision()
    config = SFTConfig(
        output_dir=str(out),
        learning_rate=settings.lr,
        num_train_epochs=settings.epochs,
        max_steps=settings.max_steps if settings.max_steps else -1,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        max_length=max_length,
        seed=settings.seed,
        data_seed=settings.seed,
        bf16=prec == "bf16",
        use_cpu=prec == "fp32-cpu",  # TRL turns bf16 on unless told: not on a CPU
        gradient_checkpointing=settings.gradient_checkpointing,
        logging_steps=1,
        save_strategy="no",
        report_to="none",  # one save, at the end, below
    )
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer)
    output = trainer.train()
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    result = SFTResult(
        steps=trainer.state.global_step,
        final_loss=losses[-1] if losses else None,
        mean_loss=output.training_loss,
        out_dir=out,
        seconds=time.monotonic() - start,
        precision=prec,
        max_length=max_length,
        data=report,
    )
    chosen = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()}
    summary = {
        "data": str(data),
        "settings": chosen,
        "steps": result.steps,
        "final_loss": result.final_loss,
        "mean_loss": result.mean_loss,
        "seconds": round(result.seconds, 1),
        "precision": result.precision,
        "max_length": result.max_length,
        "data_report": {k: dict(v) if isinstance(v, dict) else v for k, v in vars(result.data).items()},
    }
    (out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return result
