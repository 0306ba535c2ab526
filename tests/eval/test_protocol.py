"""The typed protocol between the parent and its jailed processes (cuda_agent/eval/protocol.py) and
the one writer of a verdict (cuda_agent/eval/draft.py), attacked: a child's answer is a claim, so
one that is not the reply its request gets is the child's failure (one line, never a traceback),
and an answer that is well formed but says less than it must (outputs it does not describe, a
timing without its figures) cannot pass for a good one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from cuda_agent.eval import checks
from cuda_agent.eval.channel import ChildError, JailedChild
from cuda_agent.eval.draft import Draft
from cuda_agent.eval.protocol import (
    MAX_TEXT,
    JudgeRequest,
    OutputMeta,
    ProtocolError,
    Reply,
    Run,
    RunResult,
    Timed,
    TimeLoop,
    parse_reply,
    parse_request,
)
from cuda_agent.eval.timing_phase import _claimed_timing
from cuda_agent.eval.tolerance import Tolerances
from cuda_agent.eval.verdict import Finding, SetResult
from cuda_agent.jail import Jail, jail_problem


# -- replies: what the parent reads ---------------------------------------------------------
@pytest.mark.parametrize(
    "line, why",
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"timing": {}}', "ok"),  # no ok at all
        (b'{"ok": "yes please", "timing": {}}', "ok"),
        (b'{"ok": true, "timing": "fast"}', "timing"),
    ],
)
def test_a_reply_that_is_not_its_requests_type_is_refused(line, why):
    with pytest.raises(ProtocolError) as e:
        parse_reply(line, Timed)
    assert why in str(e.value) and "\n" not in str(e.value)


def test_what_a_reply_may_say_is_bounded():
    r = parse_reply(b'{"ok": false, "error": "' + b"x" * 100_000 + b'", "made_up": 1, "peak_bytes": 5}', Reply)
    assert len(r.error) == MAX_TEXT and r.peak_bytes == 5 and not hasattr(r, "made_up")
    with pytest.raises(ProtocolError):
        parse_reply(b'{"ok": true, "peak_bytes": -1}', Reply)


def test_outputs_claimed_but_not_described_do_not_pass():
    """A forged run reply: the right number of outputs claimed, none described. Compared output by
    output, nothing would be compared and the set would pass: it is wrong instead."""
    ref = torch.ones(8)
    forged = RunResult(ok=True, n_outputs=1, outputs=[])
    result, found = checks.check_set(1, forged, [ref.clone()], [ref], [ref.double()], {}, Tolerances(), True, False)
    assert not result.ok and "output" in result.error
    honest = RunResult(
        ok=True, n_outputs=1, outputs=[OutputMeta(plain=True, type="Tensor", shape=[8], stride=[1], dtype="float32")]
    )
    result, found = checks.check_set(1, honest, [ref.clone()], [ref], [ref.double()], {}, Tolerances(), True, False)
    assert result.ok and not found


@pytest.mark.parametrize("timing", [None, {}, {"median_ms": 0.1}, {"median_ms": "fast", "mean_ms": 1}])
def test_a_timing_without_its_figures_is_the_candidates_failure(timing):
    draft = Draft()
    assert _claimed_timing(Timed(ok=True, timing=timing), draft) is None
    assert draft.status == "runtime_error"
    v = draft.score({})
    assert (
        v.reward == -1 and v.error.startswith("the judge's timing does not follow the protocol") and "\n" not in v.error
    )


# -- requests: what the child reads ---------------------------------------------------------
def test_the_child_reads_only_the_requests_it_serves():
    assert isinstance(parse_request(Run(plan={}, seed=3, files=[]).model_dump_json().encode(), JudgeRequest), Run)
    for line in (
        b'{"op": "record", "inputs": []}',  # the recorder's, not the judge's
        b'{"op": "run", "plan": {}, "seed": 3, "files": [], "shell": "rm -rf /"}',  # a field it has not
        b'{"op": "run"}',
    ):
        with pytest.raises(ProtocolError):
            parse_request(line, JudgeRequest)


CHILD = """
import sys
from cuda_agent.eval.channel import reply_fd_arg, serve
from cuda_agent.eval.protocol import JudgeRequest

fd, _ = reply_fd_arg(sys.argv[1:])
serve(fd, lambda: {"time_loop": lambda req: {"ok": True, "timing": "%s"},
                   "run": lambda req: {"ok": True, "n_outputs": "many"}}, JudgeRequest)
"""


@pytest.mark.skipif(jail_problem() is not None, reason=str(jail_problem()))
def test_a_jailed_childs_malformed_answer_is_one_line_and_its_end(tmp_path):
    """Through the real pipe: the child answers a request with what its reply type does not allow;
    the parent says so in one line, as the child's failure, and the child is gone."""
    mod = tmp_path / "mods"
    mod.mkdir()
    (mod / "liar.py").write_text(CHILD % "0.001 ms, trust me")
    package = Path(checks.__file__).resolve().parents[2]
    for req in (TimeLoop(reps=3), Run(plan={}, seed=1, files=[])):
        scratch = tmp_path / req.op
        scratch.mkdir()
        jail = Jail(writable=[scratch], cwd=scratch)
        jail.readable.append(mod)
        jail.env["PYTHONPATH"] = f"{mod}:{package}"
        child = JailedChild("liar", [], jail, scratch)
        try:
            with pytest.raises(ChildError) as e:
                child.request(req, 60)
            assert e.value.kind == "crash"
            text = str(e.value)
            assert "the liar sent an answer that does not follow the protocol" in text and "\n" not in text
            assert not child.alive()
        finally:
            child.kill()
    assert sys.modules.get("liar") is None  # nothing of the child's ran here


# -- the draft: the one writer of a verdict --------------------------------------------------
def test_the_draft_keeps_a_finding_once_and_scores_the_rest():
    side = Finding(guard="side_stream", message="a thread the library started")
    draft = Draft(findings=[side])
    draft.find(side, None, side)
    draft.add_set(SetResult(seed=1, ok=True))
    assert draft.status == "correct" and draft.failing and not draft.ok
    v = draft.score({"total": 1.23456})
    assert v.status == "guard_violation" and v.reward == -1 and v.findings == [side] and v.seconds == {"total": 1.2346}


def test_a_wrong_set_makes_the_draft_incorrect_and_a_later_failure_says_why():
    draft = Draft()
    draft.add_set(SetResult(seed=1, ok=False))
    assert draft.status == "incorrect"
    draft.fail("runtime_error", "illegal address")
    v = draft.score({})
    assert (v.status, v.error, v.correct, v.reward) == ("runtime_error", "illegal address", False, -1)
