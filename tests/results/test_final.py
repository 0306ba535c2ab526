"""Re-verification of a run's result with more input sets, and the walk down when it fails."""

from __future__ import annotations

from cuda_agent.environment import Environment
from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.results import final
from cuda_agent.results.final import export_version, ranked_correct, reverify, reverify_best
from cuda_agent.task import load_task


def test_best_passes_reverification_with_more_input_sets(session):
    ws = session.env.workspace
    head, tree = ws.head, (ws.root / "model_new.py").read_bytes()
    verdict = reverify_best(session.env, n_sets=10)
    assert verdict is not None and verdict.correct and verdict.status == "correct"
    assert len(verdict.sets) == 10 and all(s.ok for s in verdict.sets)
    assert ws.head == head and (ws.root / "model_new.py").read_bytes() == tree  # the work tree untouched
    assert not ws.repo.is_dirty(untracked_files=True)


def test_reverification_uses_more_sets_than_the_run_even_when_asked_for_fewer(session):
    rv = reverify(session.env, n_sets=1, tries=1)
    assert rv.n_sets == session.env.eval_config.n_sets + 1 == len(rv.verdict.sets)
    assert rv.task.inputs[0] == {"name": "x", "shape": [1 << 15], "dtype": "float32", "contiguous": True}
    assert rv.task.device == "cpu" and rv.task.init_inputs == [2.0]
    # the reward reported for the run: eager timed again beside the result, not the run's cached figure
    assert rv.verdict.baselines == "interleaved" and rv.verdict.eager is not None
    assert any(
        n.startswith(f"baselines timed again beside the candidate: {final.BASELINE_ROUNDS} interleaved")
        for n in rv.verdict.notes
    )
    assert "eager and torch.compile timed again beside it in interleaved rounds" in rv.summary()[0]


def test_candidates_are_correct_best_first_and_distinct(session):
    ws = session.env.workspace
    ranked = ranked_correct(ws)
    assert ranked[0].sha == ws.best().sha
    assert all(v.correct for v in ranked) and 1 not in [v.version for v in ranked]
    assert len(ranked) == 2  # v3 and v4 hold the same files: re-verifying both would prove nothing new


def test_export_writes_the_commit_not_the_work_tree(session, tmp_path):
    ws = session.env.workspace
    v1 = ws.versions()[0]
    out = export_version(ws, v1.sha, tmp_path / "v1")
    assert "alpha * x[i] - y[i]" in (out / "kernels" / "scale_add.cu").read_text()  # v1's wrong kernel
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == ["README.md", "model_new.py", "scale_add.cu"]


def _failing_first(monkeypatch, fail: int):
    """The re-verification's verdicts for the first `fail` versions come back incorrect, as if an
    input set the run never drew had exposed the kernel."""
    seen = []

    class Flaky(Evaluator):
        def evaluate(self, candidate_dir, **kw):
            v = super().evaluate(candidate_dir, **kw)
            seen.append(candidate_dir)
            if len(seen) <= fail:
                v.status, v.correct, v.reward = "incorrect", False, -1
                v.sets[-1].ok = False
            return v

    monkeypatch.setattr(final, "Evaluator", Flaky)
    return seen


def test_best_failing_reverification_is_not_the_result_and_the_next_best_is_tried(session, monkeypatch):
    _failing_first(monkeypatch, fail=1)
    rv = reverify(session.env, n_sets=10)
    best = session.env.workspace.best()
    assert [a.passed for a in rv.attempts] == [False, True]
    assert rv.attempts[0].version.sha == best.sha
    assert rv.verified.version.sha != best.sha and rv.verdict.correct
    text = "\n".join(rv.summary())
    assert f"version {best.version} (the run's best) FAILED re-verification" in text
    assert "is not a result" in text and f"version {rv.verified.version.version} (next best) passed" in text


def test_no_version_passing_again_means_no_result(session, monkeypatch):
    seen = _failing_first(monkeypatch, fail=99)
    assert reverify_best(session.env, n_sets=3) is None
    assert len(seen) == 2  # both distinct correct versions tried, the incorrect one never
    rv = reverify(session.env, n_sets=3, tries=1)
    assert len(rv.attempts) == 1 and rv.verified is None
    assert "this run has no verified result" in rv.summary()[-1]


def test_no_correct_version_gives_none(tmp_path, cpu_task, make_config):
    wrong = cpu_task / "wrong"
    with Environment.create(
        load_task(str(cpu_task / "model.py")), runs_dir=tmp_path / "runs", eval_config=make_config(tmp_path / "cache")
    ) as env:
        assert reverify_best(env) is None  # no version at all
        for path in ("kernels/scale_add.cu", "model_new.py"):
            env.step(
                "edit_file",
                {"mode": "create", "path": path, "overwrite": True, "file_text": (wrong / path).read_text()},
            )
        assert env.step("verify", {}).reward == -1
        rv = reverify(env)
        assert rv.verdict is None and rv.attempts == [] and "no correct version" in rv.summary()[0]
