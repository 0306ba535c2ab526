"""The environment driven by scripted tool calls on CPU: real workspace, real nvcc, real worker."""

from pathlib import Path

import pytest

from cuda_agent.environment import Environment
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.task import load_task

TASK = Path(__file__).parent / "harness" / "cpu_task"


@pytest.fixture
def env(tmp_path):
    cfg = EvalConfig(
        device="cpu",
        n_sets=2,
        baselines=["eager"],
        timeout_s=60,
        timing=TimingConfig(warmup_ms=5, min_batches=2, max_batches=3, budget_ms=30),
        cache_dir=tmp_path / "cache",
    )
    with Environment.create(load_task(str(TASK / "model.py")), runs_dir=tmp_path / "runs", eval_config=cfg) as e:
        yield e


def test_scripted_session_write_compile_verify_benchmark_finish(env):
    kernel = (TASK / "honest" / "kernels" / "scale_add.cu").read_text()
    steps = [
        ("edit_file", {"mode": "create", "path": "kernels/scale_add.cu", "file_text": kernel}),
        (
            "edit_file",
            {
                "mode": "create",
                "path": "model_new.py",
                "overwrite": True,
                "file_text": (TASK / "honest" / "model_new.py").read_text(),
            },
        ),
        ("compile", {}),
        ("verify", {}),
        ("benchmark", {}),
    ]
    results = [env.step(name, args) for name, args in steps]
    assert [r.result.status for r in results] == ["ok"] * 5, [r.result.observation for r in results]
    assert "scale_add" in results[2].result.observation  # the launcher list
    assert results[3].reward in (1, 2) and "status: correct" in results[3].result.observation
    assert results[4].reward in (1, 2) and "speedup" in results[4].result.observation
    versions = env.workspace.versions()
    assert [v.status for v in versions][-2:] == ["correct", "correct"]
    assert env.episode_reward() == env.workspace.best().reward >= 1
    done = env.step("finish", {"summary": "fused host loop"})
    assert done.done and done.reward is None


def test_wrong_kernel_gives_reward_minus_one_and_the_reason(env):
    env.step(
        "edit_file",
        {
            "mode": "create",
            "path": "kernels/scale_add.cu",
            "file_text": (TASK / "wrong" / "kernels" / "scale_add.cu").read_text(),
        },
    )
    env.step(
        "edit_file",
        {
            "mode": "create",
            "path": "model_new.py",
            "overwrite": True,
            "file_text": (TASK / "wrong" / "model_new.py").read_text(),
        },
    )
    r = env.step("verify", {})
    assert r.reward == -1 and "outside tolerance" in r.result.observation
    assert env.episode_reward() == -1


def test_compile_error_is_an_observation_and_the_next_call_works(env):
    r = env.step(
        "edit_file",
        {
            "mode": "create",
            "path": "kernels/k.cu",
            "file_text": 'extern "C" void f(float* x, cudaStream_t s) { undefined_thing; }\n',
        },
    )
    assert r.result.status == "ok"
    c = env.step("compile", {})
    assert c.result.status == "error" and "kernels/k.cu:1" in c.result.observation
    assert env.step("list_files", {}).result.status == "ok"


def test_the_same_failing_files_are_not_evaluated_or_committed_twice(env):
    """Issue 15: after a failed compile, v3, v4 and v5 were all compile_error of the same files."""
    bad = 'extern "C" void scale_add(float* x, cudaStream_t s) { undefined_thing; }\n'
    env.step("edit_file", {"mode": "create", "path": "kernels/scale_add.cu", "file_text": bad})
    first = env.step("verify", {})
    assert first.reward == -1 and "status: compile_error" in first.result.observation
    (v1,) = env.workspace.versions()
    for tool in ("verify", "benchmark"):
        again = env.step(tool, {})
        text = again.result.observation
        assert again.result.status == "error" and again.reward is None and again.result.verdict is None
        assert text.startswith(f"not evaluated: model_new.py and kernels/ are unchanged since version {v1.version}")
        assert "nothing was committed" in text and "undefined_thing" in text  # the earlier verdict, again
        assert again.result.data["same_as"] == {"version": v1.version, "commit": v1.sha, "status": "compile_error"}
        assert [v.sha for v in env.workspace.versions()] == [v1.sha]
    env.ctx.failed_builds.clear()  # a resumed run: the verdict is not in this process
    resumed = env.step("verify", {}).result.observation
    assert "unchanged since version 1" in resumed and "run compile to see the errors" in resumed
    # a changed file (here model_new.py alone) is evaluated and committed as usual
    (env.workspace.root / "model_new.py").write_text((TASK / "honest" / "model_new.py").read_text())
    changed = env.step("verify", {})
    assert changed.result.verdict is not None and len(env.workspace.versions()) == 2
    env.step(
        "edit_file",
        {
            "mode": "create",
            "path": "kernels/scale_add.cu",
            "overwrite": True,
            "file_text": (TASK / "honest" / "kernels" / "scale_add.cu").read_text(),
        },
    )
    fixed = env.step("verify", {})
    assert fixed.reward >= 1 and len(env.workspace.versions()) == 3
    assert env.step("verify", {}).result.verdict is not None  # a correct version is evaluated again (fresh seeds)


def test_tampering_with_a_protected_file_is_a_guard_violation(env):
    assert (
        env.step(
            "edit_file", {"mode": "create", "path": "model.py", "overwrite": True, "file_text": "x = 1\n"}
        ).result.status
        == "error"
    )  # the tool refuses
    (env.workspace.root / "model.py").write_text("# tampered\n")  # as a shell could
    r = env.step("verify", {})
    assert r.reward == -1 and "protected_file" in r.result.observation
    assert env.workspace.changed_protected() == []  # restored


def test_unknown_tool_and_bad_arguments_are_observations(env):
    assert "no tool named" in env.step("nope", {}).result.observation
    assert env.step("view_file", {"start_line": 3}).result.status == "error"
