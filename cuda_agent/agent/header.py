"""A run's header record: the task, the model, the settings with credentials dropped
(secrets.scrub_config) and the software versions that produced it."""

from __future__ import annotations

from cuda_agent.records import Header, TaskInfo
from cuda_agent.secrets import scrub_config
from cuda_agent.versions import software_versions


def make_header(run_id: str, task: TaskInfo, model: str, config: dict, messages: list[dict],
                tools: list[dict]) -> Header:
    return Header(run_id=run_id, task=task, model=model, config=scrub_config(config),
                  versions=software_versions(), messages=messages, tools=tools)
