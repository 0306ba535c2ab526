"""`train grpo`'s record of a run, in its output folder: `log.jsonl` (one line per optimizer step),
`episodes.jsonl` (one line per rollout: its task, reward and the verdict ledger's entries) and
`reward.png` (reward per step; needs matplotlib, the `plot` extra).

A step's line:
- `rewards`, `reward`, `reward_std`: the milestone rewards of the step's rollouts (-1 no correct
  version; 1 correct; 2 faster than eager by >5%; 3 faster than eager and torch.compile), as each
  episode's verdict ledger records them; their mean and (sample) standard deviation.
- `correct_rate`: the share of the step's rollouts that found a correct version (reward >= 1).
- `evaluations`: verify/benchmark calls that produced a verdict in the step; `evaluations_total`
  since the run started; `evaluations_per_hour`: the step's, over its wall time (`seconds`);
  `elapsed_s`: the run's training time, resumed runs included; `setup_seconds` (on a run's first
  step only): from building the trainer to its first step (loading, TRL's set-up), in no step.
- `loss`, `grad_norm`, `learning_rate`, `completion_tokens` (mean tokens the model generated per
  rollout, observations not counted), `tool_calls` (mean per rollout): from TRL's own log; `trl`
  holds every figure TRL logged for the step.

A resumed run starts from its last checkpoint: lines of steps after it (their training is redone)
are dropped when it starts, so the log is always that of the weights the run holds.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

LOG = "log.jsonl"
EPISODES = "episodes.jsonl"
PLOT = "reward.png"


class RunLog:
    def __init__(self, out: Path):
        self.out = Path(out)
        self.log, self.episodes, self.plot = self.out / LOG, self.out / EPISODES, self.out / PLOT

    def lines(self) -> list[dict]:
        if not self.log.is_file():
            return []
        return [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines() if line.strip()]

    def truncate_after(self, step: int) -> None:
        """Keep only what the weights at `step` were trained on (a resumed run redoes later steps)."""
        for path in (self.log, self.episodes):
            if path.is_file():
                kept = [
                    line
                    for line in path.read_text(encoding="utf-8").splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= step
                ]
                path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")

    def totals(self) -> tuple[int, float]:
        """(evaluations, training seconds) of the steps logged so far."""
        last = (self.lines() or [{}])[-1]
        return int(last.get("evaluations_total", 0)), float(last.get("elapsed_s", 0.0))

    def write_step(
        self,
        step: int,
        episodes: list[dict],
        trl: dict[str, Any],
        seconds: float,
        evaluations_before: int,
        elapsed_before: float,
        peak_gpu_gib: float | None = None,
        setup_seconds: float | None = None,
    ) -> dict:
        rewards = [e["reward"] for e in episodes]
        evaluations = sum(e["evaluations"] for e in episodes)
        tool_seconds = sum(e.get("tool_seconds", 0.0) for e in episodes)
        mean = sum(rewards) / len(rewards) if rewards else None
        # the sample standard deviation, as TRL's `reward_std` (0 for one rollout)
        std = (
            math.sqrt(sum((r - mean) ** 2 for r in rewards) / max(1, len(rewards) - 1))
            if rewards and mean is not None
            else None
        )
        line = {
            "step": step,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "seconds": round(seconds, 2),
            # before the run's first step (loading, the trainer's set-up): not in any step's seconds
            "setup_seconds": None if setup_seconds is None else round(setup_seconds, 2),
            "elapsed_s": round(elapsed_before + seconds, 2),
            "episodes": len(episodes),
            "reward": mean,
            "reward_std": std,
            "rewards": rewards,
            "correct_rate": sum(e["correct"] for e in episodes) / len(episodes) if episodes else None,
            "evaluations": evaluations,
            "evaluations_total": evaluations_before + evaluations,
            "evaluations_per_hour": round(evaluations * 3600 / seconds, 1) if seconds > 0 else None,
            # the step's wall time inside the tools (builds, evaluations): the rest is generation and the update
            "tool_seconds": round(tool_seconds, 2),
            "tool_share": round(tool_seconds / seconds, 3) if seconds > 0 else None,
            "peak_gpu_gib": peak_gpu_gib,  # the trainer's own (the policy); the judges' are in their verdicts
            "loss": trl.get("loss"),
            "grad_norm": trl.get("grad_norm"),
            "learning_rate": trl.get("learning_rate"),
            "completion_tokens": trl.get("completions/mean_length"),
            "tool_calls": trl.get("tools/call_frequency"),
            "trl": trl,
        }
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
        with open(self.episodes, "a", encoding="utf-8") as f:
            for e in episodes:
                f.write(json.dumps({"step": step, **e}) + "\n")
        return line

    def draw(self) -> Path | None:
        """reward.png from the log: each rollout's reward, the step's mean, the correct rate; None without
        matplotlib."""
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
            from matplotlib.ticker import MaxNLocator
        except ImportError:
            return None
        lines = self.lines()
        fig = Figure(figsize=(7, 4))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        steps = [line["step"] for line in lines]
        for line in lines:
            ax.scatter([line["step"]] * len(line["rewards"]), line["rewards"], s=12, alpha=0.35, color="tab:blue")
        ax.plot(steps, [line["reward"] for line in lines], marker="o", color="tab:blue", label="mean reward")
        if steps:
            ax.set_xlim(min(steps) - 0.5, max(steps) + 0.5)
        ax.set(
            xlabel="optimizer step",
            ylabel="milestone reward (-1 .. 3)",
            ylim=(-1.3, 3.3),
            title="GRPO: reward per step (dots: rollouts)",
        )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        rate = ax.twinx()
        rate.plot(
            steps,
            [line["correct_rate"] for line in lines],
            color="tab:green",
            linestyle="--",
            marker="x",
            label="correct rate",
        )
        rate.set(ylabel="correct rate", ylim=(-0.05, 1.05))
        handles = ax.get_legend_handles_labels()[0] + rate.get_legend_handles_labels()[0]
        ax.legend(handles=handles, loc="upper left")
        fig.tight_layout()
        fig.savefig(self.plot, dpi=100)
        return self.plot
