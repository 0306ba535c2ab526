"""The system and task messages, rendered from the package's Jinja templates (prompts/*.j2), so an
installed cuda-agent finds them wherever it runs. StrictUndefined: a variable a template names but
the caller forgot is an error, not a silently empty prompt."""

from __future__ import annotations

from importlib import resources
from typing import Any

import jinja2

from cuda_agent.task import Task, describe_value

# Which system/task prompt a run was shown: recorded in the run header and in every exported record,
# so training data can be split by it. Bump it whenever the templates or SKILL.md change what a model sees.
PROMPT_VERSION = 1

_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False,
                          autoescape=False, trim_blocks=False)


def _template(name: str) -> jinja2.Template:
    text = (resources.files("cuda_agent") / "prompts" / name).read_text(encoding="utf-8")
    return _ENV.from_string(text)


def skill_text() -> str:
    return (resources.files("cuda_agent") / "skills" / "SKILL.md").read_text(encoding="utf-8")


def system_message(*, native_tools: bool, skill: str | None = None) -> str:
    """The role, the goal, SKILL.md and how tools are called. A text-protocol model's client appends
    the tool list and the action format (text_protocol.to_text_messages), so they are not repeated."""
    return _template("system.j2").render(native_tools=native_tools,
                                         skill=(skill if skill is not None else skill_text()).strip())


def task_message(task: Task, *, device: str, baselines: list[str], limits: dict[str, Any]) -> str:
    """The task's source, its input shapes and dtypes, the goal and the limits (AgentConfig fields)."""
    return _template("task.j2").render(
        class_name=task.class_name, name=task.name, source=task.path.read_text(encoding="utf-8").strip(),
        inputs_source=task.inputs_path.read_text(encoding="utf-8").strip() if task.inputs_path else "",
        inputs=input_summary(task), device=device, baselines=baselines, **limits)


def input_summary(task: Task) -> list[dict] | None:
    """Shapes and dtypes of get_inputs(), drawn on the meta device so a 6 GB input costs nothing;
    None when the task's inputs cannot be made there (then the prompt points at get_inputs)."""
    try:
        return [describe_value(x) for x in task.draw_inputs(seed=0, device="meta")]
    except Exception:  # any failure of the task's own code here only costs the summary
        return None
