"""A run's header record: the task, the model, the settings with credentials dropped
(secrets.scrub_config), the software versions that produced it, and what the model is shown: the
tool protocol (native calls or the text protocol) and the prompts' version (prompts.PROMPT_VERSION)."""

from __future__ import annotations

from pydantic import BaseModel

from cuda_agent.agent.prompts import PROMPT_VERSION
from cuda_agent.records import Header, TaskInfo
from cuda_agent.secrets import scrub_config
from cuda_agent.versions import software_versions


def protocol_of(model) -> str:
    return "native" if getattr(model, "native_tools", True) else "text"


def make_header(run_id: str, task: TaskInfo, model: str, config: dict, messages: list[dict],
                tools: list[dict], protocol: str | None = None) -> Header:
    return Header(run_id=run_id, task=task, model=model, config=scrub_config(config),
                  versions=software_versions(), messages=messages, tools=tools, protocol=protocol,
                  prompt_version=PROMPT_VERSION)


def run_config(model, env, agent_config: BaseModel, settings_record: dict | None) -> dict:
    """What a header (and a resume marker) records of a run's settings: the limits, the evaluation,
    the tools (resume offers the same again), the model client's settings (never its key)."""
    model_config = getattr(model, "config", None)
    tools = getattr(env, "tool_settings", None)
    return {"agent": agent_config.model_dump(mode="json"), "eval": env.eval_config.model_dump(mode="json"),
            "tools": tools.model_dump(mode="json") if tools is not None else {},
            "model": model_config.model_dump(mode="json") if isinstance(model_config, BaseModel) else {},
            **({"llm": model.resolved()} if callable(getattr(model, "resolved", None)) else {}),
            **({"settings": settings_record} if settings_record else {})}


def run_header(run_id: str, model, env, config: dict, messages: list[dict], tools: list[dict]) -> Header:
    t = env.workspace.record.task
    return make_header(run_id, TaskInfo(path=t.path, class_name=t.class_name, hash=t.source_hash, name=t.name),
                       model.name, config, messages, tools, protocol_of(model))
