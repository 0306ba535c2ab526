"""The long steps of the commands say what they do and how far along they are (cuda_agent/progress.py),
here off a terminal: plain lines on stderr, stdout left to the result (--json: one JSON document),
nothing with --quiet. CPU task, scripted model, eager baseline only."""

import json
import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from cuda_agent.cli import app

TASK = Path(__file__).parent / "harness" / "cpu_task"
HONEST_MODEL = (TASK / "honest" / "model_new.py").read_text()


def call(name, **args):
    return {"content": f"calling {name}", "tool_calls": [{"name": name, "arguments": args}]}


def honest_script(path: Path, versions: int = 1) -> Path:
    """`versions` correct versions of different files (each a benchmark), then finish."""
    steps = [
        call(
            "edit_file",
            mode="create",
            path="kernels/scale_add.cu",
            file_text=(TASK / "honest" / "kernels" / "scale_add.cu").read_text(),
        )
    ]
    for k in range(versions):
        steps += [
            call(
                "edit_file",
                mode="create",
                path="model_new.py",
                overwrite=True,
                file_text=f"# version {k}\n" + HONEST_MODEL,
            ),
            call("benchmark"),
        ]
    path.write_text(json.dumps(steps + [call("finish", summary="host loop")]))
    return path


def optimize(tmp_path, script, *flags):
    return CliRunner().invoke(
        app,
        [
            "optimize",
            str(TASK / "model.py"),
            "--script",
            str(script),
            "--out",
            str(tmp_path / "runs"),
            "--device",
            "cpu",
            "--no-compile-baseline",
            *flags,
        ],
    )


def test_optimize_says_the_first_evaluation_and_each_re_verification_on_stderr_and_json_stays_clean(tmp_path):
    r = optimize(tmp_path, honest_script(tmp_path / "s.json", versions=2), "--json")
    assert r.exit_code in (0, 1), r.output
    summary = json.loads(r.stdout)  # stdout is the JSON document alone
    assert summary["stop_reason"] == "finished" and summary["verified_reward"] >= 1
    lines = r.stderr.splitlines()
    # the first evaluation starts the evaluator and times the baseline: said; the second is not
    assert (
        "first evaluation (benchmark): starting the evaluator (the task's reference, the jailed recorder and "
        "judge)" in lines
    )
    assert any(re.fullmatch(r"first evaluation \(benchmark\): correct in \d+ s", line) for line in lines), lines
    assert sum(line.startswith("first evaluation") for line in lines) >= 2
    assert not any(line.startswith("benchmark") for line in lines)
    # two correct versions of different files: the best is re-verified first, "1 of 2", and passes
    assert "re-verifying: starting the evaluator (10 fresh input sets; the run used 5)" in lines
    best = summary["best"]["version"]
    assert f"re-verifying version {best} (1 of 2)" in lines
    # its timing: three interleaved rounds beside the eager baseline, seconds long on any machine
    assert f"re-verifying version {best} (1 of 2): timing it, with eager beside it in 3 interleaved rounds" in lines
    assert any(re.fullmatch(rf"version {best} passed re-verification in \d+ s", line) for line in lines), lines
    assert "(2 of 2)" not in r.stderr  # the first passed: no other version is tried


def test_optimize_quiet_prints_the_result_line_only(tmp_path):
    r = optimize(tmp_path, honest_script(tmp_path / "s.json"), "--quiet")
    assert r.exit_code in (0, 1), r.output
    assert r.stderr == "", r.stderr
    line = r.stdout.splitlines()[0]
    assert line.startswith("finished after 4 steps; best: version 1, re-verified") and "re-verifying" not in r.stdout


def test_baselines_say_which_task_of_how_many_and_what_is_timed(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "cache"))  # nothing cached: each task is timed
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    shutil.copy(TASK / "model.py", tasks / "a.py")
    (tasks / "b.py").write_text((TASK / "model.py").read_text().replace("N = 1 << 15", "N = 1 << 14"))
    (tmp_path / "eval.json").write_text(json.dumps({"timing": {"warmup_ms": 5, "budget_ms": 30}}))
    args = [
        "baselines",
        str(tasks),
        "--device",
        "cpu",
        "--no-compile-baseline",
        "--eval-config",
        str(tmp_path / "eval.json"),
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert [line for line in r.stderr.splitlines() if line.startswith("baselines")] == [
        "baselines of a on cpu (1 of 2)",
        "baselines of a on cpu (1 of 2): loading the task and its reference outputs",
        "baselines of a on cpu (1 of 2): timing eager in batches of fresh inputs "
        "(what the cache holds is read instead)",
        "baselines of b on cpu (2 of 2)",
        "baselines of b on cpu (2 of 2): loading the task and its reference outputs",
        "baselines of b on cpu (2 of 2): timing eager in batches of fresh inputs "
        "(what the cache holds is read instead)",
    ]
    assert [line.split(":")[0] for line in r.stdout.splitlines()[:2]] == ["cpu a", "cpu b"]  # results: stdout
    quiet = CliRunner().invoke(app, [*args, "--quiet"])
    assert quiet.exit_code == 0 and "baselines of" not in quiet.stderr, quiet.output
    assert quiet.stdout.count("(cached)") == 2
