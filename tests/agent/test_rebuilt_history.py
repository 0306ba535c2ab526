"""agent/history.py: the conversation rebuilt from a trajectory is what the model was last sent,
format-error feedback and trims included (what `--resume` continues from and the export writes)."""

from __future__ import annotations

from fidelity_run import make_run, native_script, sent

from cuda_agent.agent.context import OBSERVATION_MARK, replay_trim
from cuda_agent.agent.history import rebuild
from cuda_agent.agent.loop import NO_CALL_NATIVE
from cuda_agent.trajectory import read_trajectory


def test_the_rebuilt_conversation_is_what_the_model_was_last_sent(tmp_path):
    model, run_dir = make_run(tmp_path, native_script())
    records = read_trajectory(run_dir / "trajectory.jsonl")
    assert [r.stop_reason for r in records if r.type == "closing"] == ["finished"]
    trims = [r for r in records if r.type == "trim"]
    assert trims and [r.message for r in records if r.type == "format_error"] == [NO_CALL_NATIVE]
    state = rebuild(records)
    last = sent(model)
    # the last request, then the turn it answered (finish) and its result
    assert state.messages[: len(last)] == last and len(state.messages) == len(last) + 2
    assert {"role": "user", "content": NO_CALL_NATIVE} in last  # the feedback, where the loop put it
    assert any(m["role"] == "tool" and m["content"].startswith(OBSERVATION_MARK) for m in last)
    assert [state.messages[i]["role"] for i in state.turn_messages] == ["assistant"] * len(model.calls)
    # every earlier request is a prefix of the rebuilt history up to its first trim
    first_trim = trims[0].step
    before = model.calls[first_trim - 1]["messages"]  # the request of turn `first_trim`: before the pass
    assert rebuild([r for r in records if r.type != "trim"]).messages[: len(before)] == before


def test_replay_finds_a_note_whose_index_moved_by_its_call_id():
    messages = [
        {"role": "system", "content": "s"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "view_file", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "a", "content": "first line\n" + "x" * 1000},
    ]
    note = {"index": 7, "role": "tool", "tool": "view_file", "call_id": "a", "what": "observation", "chars": 1011}
    out = replay_trim(messages, [note])
    assert out[2]["content"] == f"{OBSERVATION_MARK} 1011 chars; it was view_file -> first line]"
    assert messages[2]["content"].startswith("first line")  # the input is not changed
    assert replay_trim(messages, [{**note, "call_id": "nowhere"}]) == messages
