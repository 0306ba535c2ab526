"""verl's dataset of tasks, from the runs `cuda-agent export --format verl` read (export.py): one
parquet row per distinct task, with the prompt its run started from and what the episode's
environment is made from (docs/training.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cuda_agent.secrets import Redactor
    from cuda_agent.train.run_episode import Episode

DATA_SOURCE = "cuda-agent"
ABILITY = "cuda-kernel-optimization"
AGENT_NAME = "cuda_agent"  # the agent loop name the verl glue registers (docs/training.md)


def write_verl(episodes: list[Episode], out: Path, redact: Redactor) -> int:
    """verl's dataset of *tasks*: one row per distinct task, the prompt the run started from; the
    reward comes from verl's own rollouts through our environment (extra_info says which task)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, seen = [], set()
    for ep in episodes:
        t = ep.header.task
        if t.hash in seen:
            continue
        seen.add(t.hash)
        create = {"task_hash": t.hash}  # the episode's environment is made from extra_info's task
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": m["role"], "content": m["content"]} for m in ep.header.messages],
                "ability": ABILITY,
                "reward_model": {"style": "rule", "ground_truth": t.hash},
                "extra_info": {
                    "index": len(rows),
                    "task_name": t.name,
                    "task_hash": t.hash,
                    "class_name": t.class_name,
                    "task_source": task_source(ep),
                    "need_tools_kwargs": True,
                    "tools_kwargs": {s["function"]["name"]: {"create_kwargs": create} for s in ep.header.tools},
                },
                "agent_name": AGENT_NAME,
            }
        )
    pq.write_table(pa.Table.from_pylist([redact(r) for r in rows]), out)
    return len(rows)


def task_source(ep: Episode) -> str:
    """The task file as the run was given it: model.py in the workspace's first commit."""
    from cuda_agent.run_folder import RunFolder
    from cuda_agent.workspace.history import History

    try:
        h = History.open(RunFolder(ep.path).workspace)
        return h.show(h.root_commit(), "model.py").decode("utf-8", "replace")
    except Exception as e:  # a run folder without its workspace: the row says so rather than guessing
        return f"# task source unavailable: {type(e).__name__}"
