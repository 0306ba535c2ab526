"""`cuda-agent train grpo`: RL on one machine (one GPU, or the CPU for tests) with TRL's GRPOTrainer,
over the environment the agent uses (grpo_env.py: the same tools, SKILL.md, workspace, jail and
judge), rewarded with the milestone reward from each episode's verdict ledger.

One optimizer step: `tasks_per_step` tasks, `num_generations` rollouts of each (GRPO's group: the
advantages are rewards relative to the group's), every rollout a multi-turn episode; the rollouts are
then trained one per micro-batch (gradient accumulation over the step's rollouts: agent rollouts are
long). The output folder holds the log (grpo_log.py), checkpoints (`checkpoints/checkpoint-N`: the
model, tokenizer, optimizer and trainer state), and at the end the model itself. TRL, transformers
and datasets are imported inside the functions: the optional extra `[train]`.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from cuda_agent.train.episodes import EpisodeSettings
from cuda_agent.train.grpo_log import RunLog
from cuda_agent.train.models import ModelLoadError, load_model, precision

SUMMARY = "cuda_agent_grpo.json"  # the run's settings and where it stands: beside the weights
CHECKPOINTS = "checkpoints"
RUNS = "episodes"  # the episodes' run folders (kept with keep_workspaces) and nothing else
SFT_SUMMARY = "cuda_agent_sft.json"
# what a resumed run may change; everything else shapes the batches the checkpoint was trained on
RESUMABLE = ("max_steps", "save_every", "keep_workspaces", "max_completion_length", "max_turns")


class GRPOSetupError(ValueError):
    """Bad settings, an output folder in the way, a resume with nothing to resume: one line."""


@dataclass
class GRPOSettings:
    tasks: str  # a task folder (every task below it, as batch finds them) or one task file
    out: Path
    model: str | None = None  # a model folder, a cached hub id, or "tiny" (tiny_model.py)
    from_checkpoint: str | None = None  # a `train sft` output (or any model folder) to start from instead
    max_steps: int = 100  # optimizer steps
    num_generations: int = 4  # rollouts per task per step: GRPO's group
    tasks_per_step: int = 1
    lr: float = 1e-6
    max_completion_length: int = 24576  # tokens after the prompt, over all turns: generated ones and observations
    max_turns: int = 30  # tool calls per episode (KernelEnv's step limit)
    temperature: float = 1.0
    beta: float = 0.0  # KL to the starting policy (0: no reference model held)
    save_every: int = 10  # a checkpoint every N steps (and at the end, and on Ctrl-C)
    seed: int = 0
    gradient_checkpointing: bool = True
    keep_workspaces: bool = False
    allow_shell: bool = False
    filter: str | None = None  # regex on task ids
    limit: int | None = None  # at most this many tasks


@dataclass
class GRPOResult:
    steps: int  # the trainer's global step at the end (a resumed run counts on from its checkpoint)
    started_at: int  # the step it resumed from (0: a new run)
    stopped: bool  # Ctrl-C ended it before max_steps
    out_dir: Path
    seconds: float
    precision: str
    log: list[dict] = field(default_factory=list)  # the log's lines, every step of the run
    plot: Path | None = None

    def lines(self) -> list[str]:
        how = "stopped by Ctrl-C after" if self.stopped else "trained"
        first = f"{how} step {self.steps}" if self.started_at else f"{how} {self.steps} step(s)"
        out = [
            f"{first} in {self.seconds:.1f} s ({self.precision})"
            + (f", resumed from step {self.started_at}" if self.started_at else "")
        ]
        if self.log:
            last = self.log[-1]
            out.append(
                f"last step: reward {_fmt(last['reward'])}, correct rate {_fmt(last['correct_rate'])}, "
                f"{last['evaluations_total']} evaluation(s) in all"
            )
        out.append(f"saved the model to {self.out_dir}; checkpoints in {self.out_dir / CHECKPOINTS}")
        out.append(
            f"log: {self.out_dir / 'log.jsonl'}; plot: "
            + (str(self.plot) if self.plot else "none (matplotlib is not installed: pip install matplotlib)")
        )
        if self.stopped:
            out.append("continue with the same command and --resume")
        return out


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def last_checkpoint(out: Path) -> Path | None:
    from transformers.trainer_utils import get_last_checkpoint

    folder = Path(out) / CHECKPOINTS
    found = get_last_checkpoint(str(folder)) if folder.is_dir() else None
    return Path(found) if found else None


def settings_for_resume(out: Path, given: dict) -> GRPOSettings:
    """The settings of the run in `out`, with what a resumed run may change taken from `given`
    (flags given on this command line); another setting given with a new value is refused."""
    path = Path(out) / SUMMARY
    if not path.is_file():
        raise GRPOSetupError(f"--resume: {out} holds no train grpo run ({SUMMARY} is missing)")
    saved = json.loads(path.read_text(encoding="utf-8"))["settings"]
    differs = [k for k, v in given.items() if k not in RESUMABLE and k in saved and v is not None and v != saved[k]]
    if differs:
        raise GRPOSetupError(
            "--resume keeps the run's settings; these differ from it: "
            + ", ".join(f"{k} ({given[k]!r}, the run has {saved[k]!r})" for k in differs)
        )
    merged = {**saved, **{k: v for k, v in given.items() if k in RESUMABLE and v is not None}}
    merged["out"] = Path(out)
    return GRPOSettings(**merged)


def check_out_dir(out: Path, resume: bool) -> Path | None:
    """The checkpoint to resume from (None: a new run); GRPOSetupError when the folder is in the way."""
    out = Path(out)
    ckpt = last_checkpoint(out)
    if resume:
        if ckpt is None:
            raise GRPOSetupError(
                f"--resume: no checkpoint in {out / CHECKPOINTS} (the run stopped before it saved "
                "one): remove the folder, or pick another --out, to start again"
            )
        return ckpt
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        how = (
            "--resume to continue the run there"
            if ckpt is not None
            else "it holds no checkpoint to resume from: remove it"
            if (out / SUMMARY).is_file()
            else "remove it"
        )
        raise FileExistsError(f"{out} exists and is not empty: {how}, or pick another --out")
    return None


def starting_model(settings: GRPOSettings) -> str:
    """What the policy is loaded from: --from-checkpoint (checked against --model) or --model."""
    if settings.from_checkpoint is None:
        if settings.model is None:
            raise GRPOSetupError("give --model (a model folder, or tiny) or --from-checkpoint (a train sft output)")
        return settings.model
    ckpt = Path(settings.from_checkpoint)
    if not (ckpt / "config.json").is_file():
        raise GRPOSetupError(
            f"--from-checkpoint {ckpt}: not a model folder (no config.json): give the --out of `cuda-agent train sft`"
        )
    summary = ckpt / SFT_SUMMARY
    if settings.model is not None and summary.is_file():
        base = json.loads(summary.read_text(encoding="utf-8")).get("settings", {}).get("model")
        if base is not None and base != settings.model:
            raise GRPOSetupError(f"--from-checkpoint {ckpt} was trained from {base}, not --model {settings.model}")
    return str(ckpt)


class StopOnInterrupt:
    """Ctrl-C once: finish the current step, save a checkpoint, stop. Twice: stop now (the last checkpoint stays)."""

    def __init__(self, say: Callable[[str], None]):
        self.say, self.requested, self._old = say, False, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.say("Ctrl-C: stopping after this step, with a checkpoint (Ctrl-C again to stop at once)")

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def _callbacks(log: RunLog, book, stop: StopOnInterrupt, display, evaluations: int, elapsed: float):
    """The trainer's callbacks: the log and plot after each step, Ctrl-C, the display."""
    from transformers import TrainerCallback

    class RunCallbacks(TrainerCallback):
        def __init__(self):
            self.evaluations, self.elapsed, self.mark = evaluations, elapsed, time.monotonic()
            self.setup: float | None = None  # the trainer's set-up, logged apart from the first step
            self.lines: list[dict] = []
            self.plot: Path | None = None

        def on_train_begin(self, args, state, control, **kw):
            now = time.monotonic()
            self.setup, self.mark = now - self.mark, now

        def on_step_end(self, args, state, control, **kw):
            if stop.requested:
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_log(self, args, state, control, logs=None, **kw):
            logs = logs or {}
            if "loss" not in logs and "reward" not in logs:  # the run's closing summary (train_runtime ...)
                return
            now = time.monotonic()
            episodes = [e.as_dict() for e in book.take()]
            line = log.write_step(
                state.global_step,
                episodes,
                dict(logs),
                now - self.mark,
                self.evaluations,
                self.elapsed,
                peak_gpu_gib=_peak_gpu_gib(),
                setup_seconds=self.setup,
            )
            self.setup = None
            self.evaluations, self.elapsed, self.mark = line["evaluations_total"], line["elapsed_s"], now
            self.lines.append(line)
            self.plot = log.draw()
            if display is not None:
                display.step_done(
                    f"step {line['step']}: reward {_fmt(line['reward'])} "
                    f"(rollouts {line['rewards']}), correct rate {_fmt(line['correct_rate'])}, "
                    f"{line['evaluations']} evaluation(s), {line['seconds']:.0f} s, "
                    f"loss {_fmt(line['loss'])}"
                )

    return RunCallbacks()


def _peak_gpu_gib() -> float | None:
    """The trainer process's peak GPU memory since the last step (GiB), then the count starts again;
    None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    peak = torch.cuda.max_memory_allocated() / 2**30
    torch.cuda.reset_peak_memory_stats()
    return round(peak, 3)


def _trainer_class(display, schemas: list[dict]):
    """GRPOTrainer, telling the display what it does: a turn generated (for the rollouts still going),
    the rewards read, the loss. Hooks only: if TRL renames a method, the display says less, nothing else.
    The rollouts' prompts show `schemas` (show_schemas)."""
    from trl import GRPOTrainer

    class CudaAgentGRPOTrainer(GRPOTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            show_schemas(self, schemas)

        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            if display is not None:
                display.generating(len(prompt_ids))
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)

        def _calculate_rewards(self, *args, **kwargs):
            if display is not None:
                display.scoring()
            return super()._calculate_rewards(*args, **kwargs)

        def compute_loss(self, *args, **kwargs):
            if display is not None:
                display.training()
            return super().compute_loss(*args, **kwargs)

    return CudaAgentGRPOTrainer


def show_schemas(trainer, schemas: list[dict]) -> None:
    """Render the tools in the rollouts' prompts as `schemas`, in the registry's order: what `train sft`
    trained on and what the agent shows. TRL would render the environment's methods (sorted by name,
    get_json_schema's form), a tools block the warm-up never saw: a warmed-up policy then calls no tool.
    Only the rendering (and TRL's argument typing) reads `_env_tools`; the calls still go to the methods."""
    tools = getattr(trainer, "_env_tools", None)
    if not isinstance(tools, dict):
        raise RuntimeError("this TRL keeps no _env_tools: the rollouts would not see the agent's tool schemas")
    trainer._env_tools = {name: list(schemas) for name in tools}


@contextlib.contextmanager
def _no_cudnn_attention():
    """Rollouts grow a token at a time, and cuDNN's attention (which torch may pick on Hopper) builds
    a plan for each new length: on an H100 the first GRPO step of the tiny model took 80 s with it and
    7.4 s without (2,048 tokens a rollout); torch's other fused attention kernels need no plan."""
    import torch

    was = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)


def train_grpo(
    settings: GRPOSettings,
    eval_config,
    *,
    resume: bool = False,
    model=None,
    tokenizer=None,
    progress=None,
    say: Callable[[str], None] = lambda line: None,
) -> GRPOResult:
    """Train; `model`/`tokenizer` already loaded skip loading them (not on --resume: the checkpoint's are
    used). `progress` (cuda_agent.progress.Progress) shows the bars; `say` hears what it is about to do."""
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is "experimental" in TRL 1.16
    from transformers import PrinterCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig
    from trl.chat_template_utils import supports_tool_calling

    from cuda_agent.train.grpo_data import task_rows, to_dataset
    from cuda_agent.train.grpo_env import EpisodeBook, environment_factory, tool_schemas
    from cuda_agent.train.grpo_progress import GRPOProgress

    hf_logging.disable_progress_bar()  # transformers' own bars (loading, writing shards) among ours
    start = time.monotonic()
    out = Path(settings.out)
    ckpt = check_out_dir(out, resume)
    done = 0
    if ckpt is not None:
        done = json.loads((ckpt / "trainer_state.json").read_text())["global_step"]
        if settings.max_steps <= done:
            raise GRPOSetupError(f"--resume: the run is at step {done} already; give --max-steps above it")
    source = str(ckpt) if ckpt is not None else starting_model(settings)  # the weights, tokenizer and template
    tasks = task_rows(settings.tasks, pattern=settings.filter, limit=settings.limit)
    for line in tasks.lines():
        say(line)
    if ckpt is not None or model is None or tokenizer is None:
        model, tokenizer = load_model(source, seed=settings.seed)
    if not supports_tool_calling(tokenizer):
        raise ModelLoadError(
            f"{source}: its chat template does not show tool "
            "calls, and GRPO's environment reads the model's tool calls from its text (TRL parses "
            "them with the template's response schema): use a model whose template has tool "
            "calling (Qwen2.5/3, Llama 3.1+, ...) or --model tiny"
        )
    tokenizer.padding_side = "left"
    episode_settings = EpisodeSettings(
        runs_dir=out / RUNS,
        pool="local",
        max_steps=settings.max_turns,
        keep_workspaces=settings.keep_workspaces,
        allow_shell=settings.allow_shell,
        eval=eval_config,
    )
    window = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    completion = settings.max_completion_length
    if window and completion >= window:
        raise GRPOSetupError(
            f"--max-completion-length {completion} leaves no room for the prompt in the model's "
            f"{window} positions: give less"
        )
    prec = precision()
    rollouts = settings.tasks_per_step * settings.num_generations
    log = RunLog(out)
    if ckpt is not None:
        log.truncate_after(done)
    evaluations, elapsed = log.totals()
    _write_summary(out, settings, eval_config, done=done, checkpoint=ckpt)
    say(
        f"model: {source} ({prec}); {rollouts} rollout(s) per step "
        f"({settings.tasks_per_step} task(s) x {settings.num_generations}); up to {settings.max_turns} tool calls "
        f"and {completion} tokens per rollout; evaluations on {eval_config.device}"
    )
    if ckpt is not None:
        say(f"resuming from {ckpt} (step {done})")
    display = (
        GRPOProgress(progress, max_steps=settings.max_steps, done=done, rollouts=rollouts)
        if progress is not None
        else None
    )
    book = EpisodeBook(
        episode_settings,
        on_event=display.on_event if display else None,
        progress=display.evaluation_display() if display else None,
    )
    config = GRPOConfig(
        output_dir=str(out / CHECKPOINTS),
        learning_rate=settings.lr,
        max_steps=settings.max_steps,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=rollouts,  # one rollout per micro-batch
        num_generations=settings.num_generations,
        max_completion_length=completion,
        max_tool_calling_iterations=settings.max_turns,
        temperature=settings.temperature,
        beta=settings.beta,
        seed=settings.seed,
        data_seed=settings.seed,
        bf16=prec == "bf16",
        use_cpu=prec == "fp32-cpu",
        gradient_checkpointing=settings.gradient_checkpointing,
        logging_steps=1,
        save_strategy="steps",
        save_steps=settings.save_every,
        report_to="none",
        disable_tqdm=True,
    )
    stop = StopOnInterrupt(say)
    callbacks = _callbacks(log, book, stop, display, evaluations, elapsed)
    schemas = tool_schemas(episode_settings)
    trainer = _trainer_class(display, schemas)(
        model=model,
        args=config,
        train_dataset=to_dataset(tasks.rows),
        processing_class=tokenizer,
        environment_factory=environment_factory(book, schemas),
        callbacks=[callbacks],
    )
    trainer.remove_callback(PrinterCallback)  # our log and display say what it would print
    try:
        with stop, _no_cudnn_attention():
            trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    finally:
        book.close()
        if display is not None:
            display.close()
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    steps = trainer.state.global_step
    _write_summary(out, settings, eval_config, done=steps, checkpoint=last_checkpoint(out))
    return GRPOResult(
        steps=steps,
        started_at=done,
        stopped=stop.requested and steps < settings.max_steps,
        out_dir=out,
        seconds=time.monotonic() - start,
        precision=prec,
        log=log.lines(),
        plot=callbacks.plot or (log.plot if log.plot.is_file() else None),
    )


def _write_summary(out: Path, settings: GRPOSettings, eval_config, *, done: int, checkpoint: Path | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    chosen = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()}
    summary = {
        "settings": chosen,
        "eval": eval_config.model_dump(mode="json"),
        "step": done,
        "checkpoint": str(checkpoint) if checkpoint else None,
    }
    (out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
