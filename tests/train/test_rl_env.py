"""The RL environment (train/rl_env.py) driven by scripted tool calls: its rewards equal what
`cuda-agent eval` gives the same candidates, and the episode's reward is the best version's."""

import json
from pathlib import Path

from cpu_candidates import slow_honest  # tests/helpers
from typer.testing import CliRunner

from cuda_agent.cli import app
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.task import load_task
from cuda_agent.train.rl_env import KernelEnv

TASK = Path(__file__).resolve().parents[1] / "harness" / "cpu_task"


def eval_reward(candidate: Path) -> int:
    r = CliRunner().invoke(
        app,
        [
            "eval",
            str(TASK / "model.py"),
            "--candidate",
            str(candidate),
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--json",
        ],
    )
    return json.loads(r.stdout[r.stdout.index("{") :])["verdict"]["reward"]


def put(env: KernelEnv, candidate: Path) -> None:
    """Write a candidate's files through the model's own tool."""
    for f in sorted(candidate.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            s = env.step(
                "edit_file",
                {
                    "mode": "create",
                    "path": str(f.relative_to(candidate)),
                    "overwrite": True,
                    "file_text": f.read_text(),
                },
            )
            assert s.info["status"] == "ok" and s.reward is None and not s.done, s.observation


def test_rewards_match_eval_and_the_episode_scores_the_best_version(tmp_path):
    cfg = EvalConfig(
        device="cpu",
        n_sets=2,
        baselines=["eager"],
        cache_dir=tmp_path / "cache",
        timing=TimingConfig(warmup_ms=5, min_batches=2, max_batches=3, budget_ms=30),
    )
    env = KernelEnv(tmp_path / "runs", eval_config=cfg, max_steps=30)
    first = env.reset(load_task(str(TASK / "model.py")))
    assert [m["role"] for m in first] == ["system", "user"] and "class Model" in first[1]["content"]
    assert {t["function"]["name"] for t in env.tools()} >= {"edit_file", "compile", "verify", "benchmark", "finish"}

    put(env, TASK / "wrong")
    wrong = env.step("benchmark", {})
    assert wrong.reward == -1 == eval_reward(TASK / "wrong") and wrong.info["version"] == 1
    slow = slow_honest(tmp_path)
    put(env, slow)
    honest = env.step("benchmark", {})
    assert honest.reward == eval_reward(slow) == 1
    end = env.step("finish", {"summary": "host loop"})
    assert end.done and end.reward == honest.reward == env.episode_reward()  # the best version's reward
    env.close()
