"""The typed protocol between the parent and its jailed processes (cuda_agent/eval/protocol.py) and
the one writer of a verdict (cuda_agent/eval/draft.py), attacked: a child's answer is a claim, so
one that is not the reply its request gets is the child's failure (one line, never a traceback),
and what a judge may say at all is no evidence: its outputs are described by the checked plan, not
by its answer, and its events are at most an estimate (anything but one sane number is none)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from cuda_agent.eval import checks
from cuda_agent.eval.channel import ChildError, JailedChild
from cuda_agent.eval.checks import OutputMeta
from cuda_agent.eval.draft import Draft
from cuda_agent.eval.protocol import (
    MAX_TEXT,
    Batched,
    JudgeRequest,
    LayoutSpec,
    Prepare,
    ProtocolError,
    Reply,
    Run,
    RunBatch,
    RunResult,
    parse_reply,
    parse_request,
)
from cuda_agent.eval.tolerance import Tolerances
from cuda_agent.eval.verdict import Finding, SetResult
from cuda_agent.jail import Jail, jail_problem


# -- replies: what the parent reads ---------------------------------------------------------
@pytest.mark.parametrize(
    "line, reply, why",
    [
        (b"not json", Batched, "not JSON"),
        (b"[1, 2]", Batched, "not a JSON object"),
        (b'{"event_ms": 1.0}', Batched, "ok"),  # no ok at all
        (b'{"ok": "yes please", "event_ms": 1.0}', Batched, "ok"),
        (b'{"ok": true, "phases": "fast"}', Batched, "phases"),
        (b'{"ok": true, "kernels": "all mine"}', RunResult, "kernels"),
    ],
)
def test_a_reply_that_is_not_its_requests_type_is_refused(line, reply, why):
    with pytest.raises(ProtocolError) as e:
        parse_reply(line, reply)
    assert why in str(e.value) and "\n" not in str(e.value)


def test_what_a_reply_may_say_is_bounded():
    r = parse_reply(b'{"ok": false, "error": "' + b"x" * 100_000 + b'", "made_up": 1, "peak_bytes": 5}', Reply)
    assert len(r.error) == MAX_TEXT and r.peak_bytes == 5 and not hasattr(r, "made_up")
    with pytest.raises(ProtocolError):
        parse_reply(b'{"ok": true, "peak_bytes": -1}', Reply)


def test_outputs_not_described_do_not_pass():
    """Outputs the checked plan does not describe (here: none, beside one buffer that holds the right
    values): compared output by output, nothing would be compared and the set would pass; it is
    wrong instead. Described, the same buffer passes."""
    ref = torch.ones(8)
    result, found = checks.check_set(1, [], [ref.clone()], [ref], [ref.double()], {}, Tolerances(), True, False)
    assert not result.ok and "output" in result.error
    described = [OutputMeta(plain=True, type="Tensor", shape=[8], stride=[1], dtype="float32")]
    result, found = checks.check_set(1, described, [ref.clone()], [ref], [ref.double()], {}, Tolerances(), True, False)
    assert result.ok and not found


def test_a_run_answer_cannot_describe_outputs_or_claim_a_time_that_counts():
    """What the old run reply carried (outputs described, inputs it says were not changed) is not
    read from a judge any more: the parent reads its own block. A forged claim is ignored."""
    r = parse_reply(b'{"ok": true, "n_outputs": 1, "outputs": [], "mutated": [], "kernels": ["k"]}', RunResult)
    assert r.kernels == ["k"] and not hasattr(r, "outputs") and not hasattr(r, "mutated")


@pytest.mark.parametrize("events", ["0.001 ms", [0.1], True, float("nan"), -1.0, {"ms": 1}])
def test_events_that_are_not_one_sane_number_are_no_estimate(events):
    """The judge's events are an estimate the parent uses only where its own clock agrees: a
    malformed one is no estimate (the parent's figure counts), never a figure."""
    import json

    line = json.dumps({"ok": True, "event_ms": events}).encode()
    assert parse_reply(line, Batched).event_ms is None
    assert parse_reply(b'{"ok": true, "event_ms": 2.5}', Batched).event_ms == 2.5


# -- requests: what the child reads ---------------------------------------------------------
def test_the_child_reads_only_the_requests_it_serves():
    assert isinstance(parse_request(Run(trace=True).model_dump_json().encode(), JudgeRequest), Run)
    prepare = Prepare(plan={}, layout=LayoutSpec(nbytes=256, reps=[[0]], sizes=[16]), noop=True)
    assert parse_request(prepare.model_dump_json().encode(), JudgeRequest) == prepare
    for line in (
        b'{"op": "record", "inputs": []}',  # the recorder's, not the judge's
        b'{"op": "run", "trace": false, "shell": "rm -rf /"}',  # a field it has not
        b'{"op": "prepare", "plan": {}}',  # no layout
        b'{"op": "prepare", "plan": {}, "layout": {"nbytes": 0, "reps": [], "sizes": []}}',  # an empty block
        b'{"op": "time_loop", "reps": 3}',
    ):  # an operation the judge no longer has
        with pytest.raises(ProtocolError):
            parse_request(line, JudgeRequest)


CHILD = """
import sys
from cuda_agent.eval.channel import reply_fd_arg, serve
from cuda_agent.eval.protocol import JudgeRequest

fd, _ = reply_fd_arg(sys.argv[1:])
serve(fd, lambda: {"batch": lambda req: {"ok": True, "phases": "%s"},
                   "run": lambda req: {"ok": True, "kernels": "many"}}, JudgeRequest)
"""


@pytest.mark.skipif(jail_problem() is not None, reason=str(jail_problem()))
def test_a_jailed_childs_malformed_answer_is_one_line_and_its_end(tmp_path):
    """Through the real pipe: the child answers a request with what its reply type does not allow;
    the parent says so in one line, as the child's failure, and the child is gone."""
    mod = tmp_path / "mods"
    mod.mkdir()
    (mod / "liar.py").write_text(CHILD % "0.001 ms, trust me")
    package = Path(checks.__file__).resolve().parents[2]
    for req in (RunBatch(), Run()):
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
