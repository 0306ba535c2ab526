"""A run's header record: the task, the model, the settings with credentials dropped
(secrets.scrub_config), the software versions that produced it, and what the model is shown: the
tool protocol (native calls or the text protocol) and the prompts' version (prompts.PROMPT_VERSION)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from cuda_agent.agent.prompts import PROMPT_VERSION
from cuda_agent.records import Header, TaskInfo
from cuda_agent.secrets import scrub_config
from cuda_agent.versions import software_versions

if TYPE_CHECKING:
    from cuda_agent.agent.interfaces import AgentEnvironment, Model


def protocol_of(model: Model) -> Literal["native", "text"]:
    return "native" if model.native_tools else "text"


def make_header(
    run_id: str,
    task: TaskInfo,
    model: str,
    config: dict,
    messages: list[dict],
    tools: list[dict],
    protocol: Literal["native", "text"] | None = None,
) -> Header:
    return Header(
        run_id=run_id,
        task=task,
        model=model,
        config=scrub_config(config),
        versions=software_versions(),
        messages=messages,
        tools=tools,
        protocol=protocol,
        prompt_version=PROMPT_VERSION,
    )


def run_config(model: Model, env: AgentEnvironment, agent_config: BaseModel, settings_record: dict | None) -> dict:
    """What a header (and a resume marker) records of a run's settings: the limits, the evaluation,
    the tools (resume offers the same again), the model client's settings (never its key) and what
    it decided at run time (`llm`, when it says anything)."""
    llm = model.resolved()
    return {
        "agent": agent_config.model_dump(mode="json"),
        "eval": env.eval_config.model_dump(mode="json"),
        "tools": env.tool_settings.model_dump(mode="json"),
        "model": model.client_config(),
        **({"llm": llm} if llm else {}),
        **({"settings": settings_record} if settings_record else {}),
    }


def run_header(
    run_id: str, model: Model, env: AgentEnvironment, config: dict, messages: list[dict], tools: list[dict]
) -> Header:
    t = env.workspace.record.task
    return make_header(
        run_id,
        TaskInfo(path=t.path, class_name=t.class_name, hash=t.source_hash, name=t.name),
        model.name,
        config,
        messages,
        tools,
        protocol_of(model),
    )
