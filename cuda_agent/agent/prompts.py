"""The system and task messages, rendered from the package's Jinja templates (prompts/*.j2), so an
installed cuda-agent finds them wherever it runs. StrictUndefined: a variable a template names but
the caller forgot is an error, not a silently empty prompt."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import jinja2

from cuda_agent.profiling.roofline import OVERRIDES, GpuFacts, gpu_facts
from cuda_agent.task import Task, describe_value, task_label

if TYPE_CHECKING:
    from cuda_agent.agent.interfaces import AgentEnvironment

# Which system/task prompt a run was shown: recorded in the run header and in every exported record,
# so training data can be split by it. Bump it whenever the templates or SKILL.md change what a model sees.
PROMPT_VERSION = 4  # 4: the history is kept outside the workspace (no git in the shell); 3: the handle getter,
# the per-shape algorithm cache and the compiler barrier

_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined)


def _template(name: str) -> jinja2.Template:
    return _ENV.from_string((resources.files("cuda_agent") / "prompts" / name).read_text(encoding="utf-8"))


def skill_text() -> str:
    return (resources.files("cuda_agent") / "skills" / "SKILL.md").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Section:
    start: int  # 1-based, inclusive: what view_file's start_line/end_line take
    end: int
    title: str


def skill_sections(text: str) -> list[Section]:
    """SKILL.md's `## ` sections with their line ranges, read from the file itself, so the table
    the system prompt gives stays true when SKILL.md changes. Lines inside code fences are skipped."""
    lines, heads, fenced = text.splitlines(), [], False
    for i, line in enumerate(lines, 1):
        fenced ^= line.startswith("```")
        if not fenced and re.match(r"## \S", line):
            heads.append((i, line[3:].strip()))
    return [
        Section(start, (heads[k + 1][0] - 1) if k + 1 < len(heads) else len(lines), title)
        for k, (start, title) in enumerate(heads)
    ]


def system_message(*, native_tools: bool, skill: str | None = None) -> str:
    """The role, the reward, how tools are called, the rules the guards enforce, and where SKILL.md's
    sections are (the model reads them with view_file; the prompt does not embed it). A
    text-protocol model's client appends the tool list and the action format
    (text_protocol.to_text_messages), so they are not repeated."""
    return _template("system.j2").render(
        native_tools=native_tools, skill_sections=skill_sections(skill if skill is not None else skill_text())
    )


def env_task_message(env: AgentEnvironment, limits: dict[str, Any]) -> str:
    """task_message for an Environment: the task as its user named it, the GPU its evaluations
    run on (what the profiler's roofline knows), its baselines."""
    ev, record, tools = env.eval_config, env.workspace.record.task, env.tool_settings
    gpu = gpu_facts(ev.device, gpu_name=tools.gpu_name, arch=ev.arch, settings=tools.model_dump(include=set(OVERRIDES)))
    return task_message(
        env.reference_task(),
        name=task_label(record.path, record.class_name),
        device=ev.device,
        gpu=gpu,
        baselines=list(ev.baselines),
        limits=limits,
    )


def task_message(
    task: Task,
    *,
    device: str,
    baselines: list[str],
    limits: dict[str, Any],
    name: str | None = None,
    gpu: GpuFacts | None = None,
) -> str:
    """The task's source, its input shapes and dtypes, the GPU (None: no GPU, said plainly), the
    goal and the limits (AgentConfig fields). `name`: how the user knows the task (task_label);
    by default the task's own name."""
    return _template("task.j2").render(
        class_name=task.class_name,
        name=name or task.name,
        source=task.path.read_text(encoding="utf-8").strip(),
        inputs_source=task.inputs_path.read_text(encoding="utf-8").strip() if task.inputs_path else "",
        inputs=input_summary(task),
        device=device,
        gpu=gpu,
        baselines=baselines,
        **limits,
    )


def input_summary(task: Task) -> list[dict] | None:
    """Shapes and dtypes of get_inputs(), drawn on the meta device so a 6 GB input costs nothing;
    None when the task's inputs cannot be made there (then the prompt points at get_inputs)."""
    try:
        return [describe_value(x) for x in task.draw_inputs(seed=0, device="meta")]
    except Exception:  # any failure of the task's own code here only costs the summary
        return None
