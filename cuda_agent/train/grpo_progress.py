"""What `train grpo` shows while it runs (cuda_agent/progress.py's display): on a terminal three live
bars, the optimizer steps (N of max_steps), the rollouts of the current step (how many have finished
generating, which turn the others are on, which tool runs) and, below them, each evaluation's phases
(the tools' own display, as in `optimize`). Off a terminal one line per optimizer step.

It hears the environments (grpo_env.EpisodeBook's events) and the trainer (a generation call, a
logged step); TRL batches a step's rollouts, so a turn is generated for every rollout still going at
once, then their tool calls run one after another."""

from __future__ import annotations

from cuda_agent.progress import Job, Progress


class GRPOProgress:
    def __init__(self, progress: Progress, *, max_steps: int, done: int, rollouts: int):
        self.p, self.rollouts = progress, rollouts
        self.steps = Job(progress, "GRPO optimizer steps", max_steps, lines=False)
        self.steps.done = done
        if self.steps.bar is not None:
            self.steps.bar.update(self.steps.task, completed=done)
        self.current: Job | None = None
        self._new_batch, self._active, self._turn, self._started = False, 0, 0, 0

    def evaluation_display(self) -> Progress | None:
        """What the tools get to show evaluations with: only a live display (off a terminal their lines
        would be one per episode; the step's line counts them)."""
        return self.p if self.p.live else None

    def on_event(self, kind: str, info: dict) -> None:
        if kind == "reset":
            if self.current is None:
                self.current = Job(self.p, "rollouts", self.rollouts, lines=False)
                self._started = 0
                self.steps.step(f"step {self.steps.done + 1}")
                self.steps.phase("generating rollouts")
            self._new_batch = True
            self._started += 1
            self._say(f"starting rollout {self._started} ({info['task']})")
        elif kind == "tool":
            self._say(f"turn {self._turn}: {info['name']} ({info['task']})")
        elif kind == "reward" and self.current is not None:
            self._say(f"reward {info['reward']} ({info['task']}, {info['evaluations']} evaluation(s))")

    def generating(self, rows: int) -> None:
        """The trainer generates one turn for `rows` rollouts (those still calling tools)."""
        if self.current is None:
            return
        if self._new_batch:
            self._new_batch, self._active, self._turn = False, rows, 1
        else:
            for _ in range(max(0, self._active - rows)):
                self.current.advance()
            self._active, self._turn = rows, self._turn + 1
        self._say(f"turn {self._turn}: generating for {rows} rollout(s)")

    def scoring(self) -> None:
        """Every rollout has finished generating; their rewards are read from the verdict ledgers."""
        if self.current is not None:
            while self.current.done < self.rollouts:
                self.current.advance()
            self.steps.phase("rewards from the verdict ledgers")

    def training(self) -> None:
        """The loss and gradient of the step's rollouts, then the optimizer step."""
        if self.current is not None and self.steps.now != "loss and optimizer step":
            self.steps.phase("loss and optimizer step")

    def step_done(self, line: str) -> None:
        self._end_rollouts()
        self.steps.advance(line)

    def close(self) -> None:
        self._end_rollouts()
        self.steps.close()

    def _end_rollouts(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None

    def _say(self, what: str) -> None:
        if self.current is not None:
            self.current.phase(what)
