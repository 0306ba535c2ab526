"""A real agent run (the loop, a real Environment on the CPU task, a scripted model whose turns
count as the model's own) with what the export must reproduce as the model saw it: a format-error
turn answered by feedback, old observations trimmed, a person's message. The model keeps every
request it was sent (ScriptedModel.calls), the ground truth of "what the model was shown"."""

from __future__ import annotations

from pathlib import Path

from cuda_agent.agent.errors import FormatError
from cuda_agent.agent.loop import AgentConfig, run_agent
from cuda_agent.agent.scripted_model import ScriptedModel
from cuda_agent.environment import Environment
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.task import load_task
from cuda_agent.trajectory import TrajectoryWriter

TASK = Path(__file__).resolve().parents[1] / "harness" / "cpu_task"
BIG = "".join(f"line {i}: {'x' * 60}\n" for i in range(80))  # ~5.6k chars: trimmed once old


class OwnTurnsModel(ScriptedModel):
    """A scripted model whose answers are recorded as the model's (not `injected`), so the export
    trains on them as it would on a real model's."""

    def query(self, messages, tools):
        try:
            response = super().query(messages, tools)
        except FormatError as e:
            e.response.raw["injected"] = False
            raise
        response.raw["injected"] = False
        return response


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def turn(*calls: dict, content: str = "") -> dict:
    return {"content": content, "tool_calls": list(calls)}


def native_script() -> list[dict]:
    """Write a file, a turn with no call (format error), six views of the file (old ones trimmed), finish."""
    return (
        [
            turn(call("edit_file", mode="create", path="notes.txt", file_text=BIG), content="notes first"),
            turn(content="I think I am done?"),
        ]  # no tool call: the loop answers with feedback
        + [turn(call("view_file", path="notes.txt"), content=f"look {i}") for i in range(6)]
        + [turn(call("finish", summary="viewed"), content="done")]
    )


def make_run(
    root: Path, script: list, *, native_tools: bool = True, inbox: list[str] | None = None, trim: bool = True, **limits
) -> tuple[OwnTurnsModel, Path]:
    """Run `script` on the CPU task; the run folder (trajectory.jsonl + workspace/) and the model."""
    model = OwnTurnsModel(script, native_tools=native_tools, context_tokens=8000 if trim else None)
    # 1000 tokens per long tool output, nothing else: budget 4800, a pass goes down to 3840
    model.count_tokens = lambda ms: sum(1000 for m in ms if m["role"] == "tool" and len(m["content"] or "") > 1000)
    cfg = EvalConfig(device="cpu", baselines=["eager"], cache_dir=root / "cache")
    messages = list(inbox or [])
    with Environment.create(load_task(str(TASK / "model.py")), runs_dir=root / "runs", eval_config=cfg) as env:
        run_dir = env.workspace.root.parent
        with TrajectoryWriter(run_dir / "trajectory.jsonl") as writer:
            run_agent(
                model,
                env,
                AgentConfig(**limits),
                writer,
                inbox=lambda: [messages.pop(0)] if messages and len(model.calls) == 3 else [],
            )
    return model, run_dir


def sent(model: ScriptedModel) -> list[dict]:
    """The last request the model was sent."""
    return model.calls[-1]["messages"]
