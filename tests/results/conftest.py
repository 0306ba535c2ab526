"""One real scripted session on CPU (host-only kernels, real nvcc, real workers), shared by the
results tests: v1 incorrect, v2 correct, v3 correct with other files, v4 the same files as v3."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from cuda_agent.agent.loop import AgentConfig, RunResult, run_agent
from cuda_agent.agent.scripted_model import ScriptedModel
from cuda_agent.environment import Environment
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.run_folder import RunFolder
from cuda_agent.task import load_task
from cuda_agent.trajectory import TrajectoryWriter

TASK = Path(__file__).resolve().parents[1] / "harness" / "cpu_task"


@dataclass
class Session:
    env: Environment
    run_dir: Path
    result: RunResult
    trajectory: Path


def small_config(cache: Path) -> EvalConfig:
    # few, short batches: the CPU figure only tests the pipeline (docs/harness.md, CPU mode)
    return EvalConfig(
        device="cpu",
        n_sets=2,
        baselines=["eager"],
        timeout_s=60,
        cache_dir=cache,
        timing=TimingConfig(warmup_ms=5, min_batches=2, max_batches=3, budget_ms=30),
    )


def call(name: str, cost: float | None = 0.0, **args) -> dict:
    return {
        "content": f"calling {name}",
        "cost": cost,
        "usage": {"prompt_tokens": 100, "completion_tokens": 10},
        "tool_calls": [{"name": name, "arguments": args}],
    }


def write(path: str, text: str, **kw) -> dict:
    return call("edit_file", mode="create", path=path, file_text=text, overwrite=True, **kw)


@pytest.fixture(scope="session")
def session(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("results")
    honest = (TASK / "honest" / "model_new.py").read_text()
    script = [
        write("kernels/scale_add.cu", (TASK / "wrong" / "kernels" / "scale_add.cu").read_text()),
        write("model_new.py", honest),
        call("verify"),  # v1: incorrect
        write("kernels/scale_add.cu", (TASK / "honest" / "kernels" / "scale_add.cu").read_text()),
        call("verify", cost=None),  # v2: correct (this turn has no known price)
        write("model_new.py", "# same kernel, other files\n" + honest),
        call("verify"),  # v3: correct
        call("benchmark"),  # v4: correct, the same files as v3
        call("finish", summary="host loop"),
    ]
    with Environment.create(
        load_task(str(TASK / "model.py")), runs_dir=tmp / "runs", eval_config=small_config(tmp / "cache")
    ) as env:
        run_dir = env.workspace.root.parent
        with TrajectoryWriter(run_dir / "trajectory.jsonl") as writer:
            result = run_agent(ScriptedModel(script), env, AgentConfig(max_steps=20), writer)
        assert result.stop_reason == "finished", result
        # v4 is timed: on a loaded machine a timing guard may fail it; the tests hold either way
        assert [v.correct for v in env.workspace.versions()][:3] == [False, True, True]
        yield Session(env, run_dir, result, run_dir / "trajectory.jsonl")


@pytest.fixture(scope="session")
def cpu_task() -> Path:
    return TASK


@pytest.fixture
def make_config():
    return small_config


@pytest.fixture(scope="session")
def finalized(session):
    from cuda_agent.results import finalize_run

    return finalize_run(session.env, RunFolder(session.run_dir), session.result)
