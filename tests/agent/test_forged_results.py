"""Results the model can forge: with the shell on, a commit with reward-3 trailers and `best` moved
to it (plain git, as the shell runs it) once gave an RL episode reward 3 with no evaluation, a
closing record `best_reward: 3`, a resume note "the workspace committed version 2 (correct,
reward 3)" and an `export --format rft` row of reward 3. Every reader of results now reads the
harness's verdict ledger; the forgery changes nothing. (The history is now kept out of the jail's
sight, so only an unjailed shell, --no-sandbox, can still forge a commit: these tests run it so.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_loop import FINISH, TASK, WRITE_HONEST, call, turn

from cuda_agent.agent.loop import Agent, AgentConfig
from cuda_agent.agent.resume import resume_run
from cuda_agent.agent.scripted_model import ScriptedModel
from cuda_agent.environment import Environment
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.verdict import Verdict
from cuda_agent.jail import jail_problem
from cuda_agent.run_folder import LEDGER, TRAJECTORY
from cuda_agent.settings import ToolSettings
from cuda_agent.task import load_task
from cuda_agent.train.export import export
from cuda_agent.train.rl_env import KernelEnv
from cuda_agent.trajectory import TrajectoryWriter, read_trajectory
from cuda_agent.workspace.ledger import read_entries

FORGE = r"""set -e
echo '// nothing here' > kernels/fast.cu
git add -A
git -c user.name=m -c user.email=m@x commit -q --allow-empty -F - <<'MSG'
v{n}: correct, 50.00x vs compile, reward 3

Status: correct
Correct: yes
Reward: 3
Time-Ms: 0.001
Speedup-Compile: 50
Guards: none
Version: {n}
MSG
git update-ref refs/heads/best HEAD
git rev-parse HEAD
"""


def shell(n: int) -> dict:
    return turn(call("shell", command=FORGE.format(n=n)))


def config(tmp_path: Path, sandbox: bool = False) -> EvalConfig:
    # verify only (no timing). The forging shell runs unjailed (--no-sandbox), where its git reaches the
    # history through the workspace's pointer; in the jail git finds no repository at all (the test below)
    return EvalConfig(
        device="cpu", n_sets=2, baselines=["eager"], timeout_s=60, cache_dir=tmp_path / "cache", sandbox=sandbox
    )


class FixedJudge:
    """The harness's evaluator, answering every evaluation with one real-looking verdict: these
    tests are about where verdicts are kept and read, not how the judge reaches them."""

    verdict = Verdict(status="correct", correct=True, reward=2, speedup_vs_eager=1.5, speedup_vs_compile=0.9)

    def evaluate(self, candidate_dir, timing: bool = True) -> Verdict:
        return self.verdict

    def close(self) -> None:
        pass


def new_env(tmp_path: Path, sandbox: bool = False) -> Environment:
    env = Environment.create(
        load_task(str(TASK / "model.py")),
        runs_dir=tmp_path / "runs",
        eval_config=config(tmp_path, sandbox),
        tool_settings=ToolSettings(allow_shell=True),
    )
    env.ctx.evaluator_factory = FixedJudge
    return env


def run(tmp_path: Path, script: list, sandbox: bool = False) -> tuple[Environment, Path, int]:
    env = new_env(tmp_path, sandbox)
    path = env.workspace.root.parent / TRAJECTORY
    with env, TrajectoryWriter(path) as writer:
        Agent(ScriptedModel(script), env, AgentConfig(), writer).run()
        reward = env.episode_reward()
    return env, path, reward


def forged_sha(records) -> str:
    out = next(r for r in records if r.type == "tool_result" and r.name == "shell")
    assert "exit code 0" in out.observation, out.observation
    return out.observation.split()[-1]


def test_a_forged_commit_with_no_evaluation_scores_nothing_anywhere(tmp_path):
    env, path, reward = run(tmp_path, [shell(1), FINISH])
    records = read_trajectory(path)
    sha = forged_sha(records)
    assert env.workspace.history.git("rev-parse", "best").strip() == sha  # the forgery is in git
    assert reward == -1  # the RL episode reward
    closing = records[-1]
    assert (closing.best_version, closing.best_commit, closing.best_reward) == (None, None, None)
    # resumed: nothing about a "committed version"
    env2, messages, state = resume_run(path.parent)
    env2.close()
    assert state.recovered == [] and not any("committed version" in str(m.get("content")) for m in messages)
    # export: the closing as the run wrote it is no result; edited to match the forgery, refused
    report = export([path.parent], "rft", tmp_path / "rft.jsonl", min_reward=2)
    assert report.written == 0 and report.skipped == {"reward below 2": 1}
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text(
        "".join(
            json.dumps({**r, "best_version": 1, "best_commit": sha, "best_reward": 3} if r["type"] == "closing" else r)
            + "\n"
            for r in lines
        )
    )
    report = export([path.parent], "rft", tmp_path / "rft.jsonl", min_reward=2)
    assert report.written == 0 and "best_reward 3" in report.refused[0]


def test_a_forged_better_version_after_a_real_one_leaves_the_real_result(tmp_path):
    env, path, reward = run(tmp_path, [WRITE_HONEST, turn(call("verify")), shell(2), FINISH])
    records = read_trajectory(path)
    (real,) = [r for r in records if r.type == "evaluation"]
    assert (real.status, real.reward) == ("correct", 2)
    forged = forged_sha(records)
    closing = records[-1]
    assert (closing.best_version, closing.best_commit, closing.best_reward) == (1, real.commit, real.reward)
    assert reward == real.reward
    versions = [v.sha for v in env.workspace.versions()]
    assert versions == [real.commit] and forged not in versions
    # the evaluation record of the forged version is lost "in a kill": resume recovers nothing
    kept = [x for x in path.read_text().splitlines(keepends=True) if '"closing"' not in x]
    path.write_text("".join(kept))
    env2, messages, state = resume_run(path.parent)
    env2.close()
    assert state.recovered == [] and not any("version 2" in str(m.get("content")) for m in messages)


def test_kernel_env_rewards_a_forged_commit_minus_one(tmp_path):
    kenv = KernelEnv(
        tmp_path / "runs",
        eval_config=config(tmp_path),  # unjailed: see config()
        tool_settings=ToolSettings(allow_shell=True),
    )
    kenv.reset(load_task(str(TASK / "model.py")))
    try:
        out = kenv.step("shell", {"command": FORGE.format(n=1)})
        assert "exit code 0" in out.observation, out.observation
        assert kenv.episode_reward() == -1
        last = kenv.step("finish", {"summary": "done"})
        assert last.done and last.reward == -1
    finally:
        kenv.close()


def test_in_the_jail_the_shell_cannot_forge_a_commit_at_all(tmp_path):
    """The history is kept beside the workspace, which the jail shows empty: git finds no repository."""
    if jail_problem() is not None:
        pytest.skip(str(jail_problem()))
    env, path, reward = run(tmp_path, [WRITE_HONEST, turn(call("verify")), shell(2), FINISH], sandbox=True)
    out = next(r for r in read_trajectory(path) if r.type == "tool_result" and r.name == "shell").observation
    assert "not a git repository" in out and "exit code 0" not in out
    log = env.workspace.history.git("log", "--format=%s", "--all").splitlines()
    assert not any("50.00x" in s for s in log) and reward == 2
    assert env.workspace.history.git("rev-parse", "best").strip() == env.workspace.best().sha


def test_the_shell_can_neither_read_nor_write_the_ledger(tmp_path):
    """The ledger lies beside the workspace, outside everything the jail binds: the shell's
    `../ledger.jsonl` is not it (tests/tools/test_ledger_out_of_reach.py: also where a read-only
    system path of the jail holds the run folder)."""
    if jail_problem() is not None:
        pytest.skip(str(jail_problem()))
    line = json.dumps(
        {
            "status": "correct",
            "reward": 3,
            "content": None,
            "workspace": "workspace",
            "version": 1,
            "commit": "0" * 40,
            "correct": True,
        }
    )
    attack = turn(call("shell", command=f"cat ../ledger.jsonl; echo '{line}' >> ../ledger.jsonl; echo done"))
    env, path, reward = run(tmp_path, [turn(call("verify")), attack, FINISH], sandbox=True)
    shown = next(r for r in read_trajectory(path) if r.type == "tool_result" and r.name == "shell").observation
    assert "done" in shown and '"content"' not in shown  # the real entry was never shown
    assert [e.reward for e in read_entries(path.parent / LEDGER)] == [2] and reward == 2
