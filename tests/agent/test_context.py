"""Context trimming: under budget, stalest bulk first, the opening and the latest turns untouched,
every result still answering its call; and the loop recording each pass."""

from __future__ import annotations

import copy
import json

import pytest
from test_loop import call, env, run, turn  # noqa: F401,F811  (env: the loop tests' fixture)

from cuda_agent.agent.context import (
    ANSWER_TOKENS,
    KEEP_TURNS,
    OBSERVATION_MARK,
    REPLY_MARK,
    SOURCE_MARK,
    TrimNote,
    approx_tokens,
    context_budget,
    counter_for,
    fit_messages,
    replay_trim,
    trim_messages,
)
from cuda_agent.agent.scripted_model import ScriptedModel

SOURCE = "__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n" * 40  # ~2.3k chars
LOG = "verify: correct (5/5 sets)\n" + "max abs error 1e-7 on set 3\n" * 100  # ~2.8k chars


def chars(messages: list[dict]) -> int:
    """A counter that is easy to reason about: one token per character of content and arguments."""
    return sum(
        len(m.get("content") or "") + sum(len(c["function"]["arguments"]) for c in m.get("tool_calls") or [])
        for m in messages
    )


def conversation(turns: int = 8) -> list[dict]:
    """system, task, then turns of: write a kernel (big source), verify (big log), list (short)."""
    messages = [{"role": "system", "content": "S" * 3000}, {"role": "user", "content": "T" * 1000}]
    for t in range(turns):
        calls = [
            {
                "id": f"e{t}",
                "type": "function",
                "function": {
                    "name": "edit_file",
                    "arguments": json.dumps({"mode": "create", "path": f"kernels/k{t}.cu", "file_text": SOURCE}),
                },
            },
            {"id": f"v{t}", "type": "function", "function": {"name": "verify", "arguments": "{}"}},
            {"id": f"l{t}", "type": "function", "function": {"name": "list_files", "arguments": "{}"}},
        ]
        messages.append({"role": "assistant", "content": f"turn {t}", "tool_calls": calls})
        messages += [
            {"role": "tool", "tool_call_id": f"e{t}", "content": f"created kernels/k{t}.cu (40 lines)"},
            {"role": "tool", "tool_call_id": f"v{t}", "content": LOG},
            {"role": "tool", "tool_call_id": f"l{t}", "content": "model.py\nkernels/"},
        ]
    messages.append({"role": "user", "content": "try float4 loads"})
    return messages


def assert_paired(messages: list[dict]) -> None:
    """Every assistant call is answered right after it, in order, by a tool message with its id."""
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            ids = [c["id"] for c in m.get("tool_calls") or []]
            answers = messages[i + 1 : i + 1 + len(ids)]
            assert [a["role"] for a in answers] == ["tool"] * len(ids)
            assert [a["tool_call_id"] for a in answers] == ids
    assert sum(m["role"] == "tool" for m in messages) == sum(len(m.get("tool_calls") or []) for m in messages)


def protected(messages: list[dict]) -> list[dict]:
    """The opening messages and everything from the start of the latest KEEP_TURNS turns."""
    starts = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    return messages[:2] + messages[starts[-KEEP_TURNS] :]


def test_under_budget_nothing_changes():
    messages = conversation()
    out, notes = trim_messages(messages, chars(messages), chars)
    assert out == messages and notes == []


def test_old_observations_go_first_oldest_first_until_under_budget():
    messages = conversation()
    before = copy.deepcopy(messages)
    budget = chars(messages) - 2 * len(LOG)  # two or three old logs are enough
    out, notes = trim_messages(messages, budget, chars)
    assert messages == before  # the caller's list is left alone
    assert chars(out) <= budget
    assert {n.what for n in notes} == {"observation"} and all(n.tool == "verify" for n in notes)
    assert [n.call_id for n in notes] == [f"v{t}" for t in range(len(notes))]  # oldest first, none skipped
    assert 2 <= len(notes) <= 3  # it stops once under budget
    shortened = out[notes[0].index]
    assert shortened["tool_call_id"] == "v0" and shortened["role"] == "tool"
    assert shortened["content"] == f"{OBSERVATION_MARK} {len(LOG)} chars; it was verify -> verify: correct (5/5 sets)]"
    assert notes[0] == TrimNote(
        index=notes[0].index, role="tool", tool="verify", call_id="v0", what="observation", chars=len(LOG)
    )
    assert_paired(out)


def test_sources_go_only_after_every_old_observation():
    messages = conversation()
    old_turns = 8 - KEEP_TURNS
    budget = chars(messages) - old_turns * len(LOG) - len(SOURCE)  # all old logs and one source at least
    out, notes = trim_messages(messages, budget, chars)
    assert chars(out) <= budget
    kinds = [n.what for n in notes]
    assert kinds == ["observation"] * old_turns + ["source"] * (len(notes) - old_turns) and "source" in kinds
    sources = [n for n in notes if n.what == "source"]
    assert [n.call_id for n in sources] == [f"e{t}" for t in range(len(sources))]
    first = out[sources[0].index]
    assert first["role"] == "assistant" and first["content"] == "turn 0"
    args = json.loads(first["tool_calls"][0]["function"]["arguments"])
    assert args == {"mode": "create", "path": "kernels/k0.cu", "file_text": f"{SOURCE_MARK} {len(SOURCE)} chars]"}
    assert (sources[0].field, sources[0].chars, sources[0].tool) == ("file_text", len(SOURCE), "edit_file")
    assert [c["id"] for c in first["tool_calls"]] == ["e0", "v0", "l0"]  # the calls themselves stay
    assert_paired(out)


def test_system_task_and_latest_turns_are_never_trimmed_even_over_budget():
    messages = conversation()
    out, notes = trim_messages(messages, 0, chars)  # impossible: everything that may go, goes
    assert protected(out) == protected(messages)
    assert chars(out) > 0 and len(out) == len(messages) and [m["role"] for m in out] == [m["role"] for m in messages]
    # short observations and user messages stay whole; old logs and sources are all notes now
    assert {n.call_id for n in notes} == {f"{k}{t}" for k in "ve" for t in range(8 - KEEP_TURNS)}
    assert all(m["content"] == messages[i]["content"] for i, m in enumerate(out) if m["role"] == "user")
    assert_paired(out)
    again, more = trim_messages(out, 0, chars)  # a second pass finds nothing left to shorten
    assert again == out and more == []


def test_a_short_history_has_nothing_to_trim():
    messages = conversation(KEEP_TURNS)
    out, notes = trim_messages(messages, 10, chars)
    assert out == messages and notes == []


def test_target_sets_how_far_a_pass_goes():
    messages = conversation()
    budget = chars(messages) - 1
    _, to_budget = trim_messages(messages, budget, chars)
    out, to_target = trim_messages(messages, budget, chars, target_tokens=budget - 3 * len(LOG))
    assert len(to_budget) == 1 and len(to_target) == 4 and chars(out) <= budget - 3 * len(LOG)


def test_malformed_call_arguments_are_left_as_written():
    messages = conversation()
    bad = "{not json " + SOURCE
    messages[2]["tool_calls"][0]["function"]["arguments"] = bad
    out, notes = trim_messages(messages, 0, chars)
    assert out[2]["tool_calls"][0]["function"]["arguments"] == bad
    assert "e0" not in {n.call_id for n in notes}


def test_approx_tokens_counts_content_and_call_arguments():
    assert approx_tokens([{"role": "user", "content": "x" * 350}]) == 100 + 4
    m = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "n" * 5, "arguments": "a" * 65}}],
    }
    assert approx_tokens([m]) == 20 + 4


def test_context_budget_leaves_room_for_the_answer_and_the_tool_schemas():
    tools = [{"type": "function", "function": {"name": "x" * 700}}]
    schema_tokens = chars([{"role": "system", "content": json.dumps(tools)}])

    def windowed(window, max_tokens=None):
        return ScriptedModel([], context_tokens=window, max_tokens=max_tokens)

    assert context_budget(windowed(None), tools, chars) is None
    assert context_budget(windowed(100_000), [], chars) == 85_000 - ANSWER_TOKENS
    assert context_budget(windowed(100_000, max_tokens=1000), tools, chars) == 85_000 - 1000 - schema_tokens
    assert context_budget(windowed(8000), [], chars) == 6800 - 2000  # a small window: a quarter for the answer


def test_counter_for_picks_the_models_own_count_else_the_estimate():
    messages = [{"role": "user", "content": "the quick brown fox " * 50}]
    scripted = ScriptedModel([])
    assert counter_for(scripted)(messages) == approx_tokens(messages)  # no tokenizer: None, the estimate
    scripted.count_tokens = chars
    assert counter_for(scripted)(messages) == chars(messages) != approx_tokens(messages)
    scripted.count_tokens = lambda ms: None if len(ms) > 1 else 7  # it may give up on some messages only
    assert counter_for(scripted)(messages) == 7 and counter_for(scripted)(messages * 2) == approx_tokens(messages * 2)
    pytest.importorskip("litellm")
    from cuda_agent.agent.litellm_model import LitellmModel, _litellm

    count = counter_for(LitellmModel("openai/gpt-4o"))
    exact = _litellm().token_counter(model="openai/gpt-4o", messages=messages)
    assert count(messages) == exact != approx_tokens(messages)


def test_the_loop_trims_before_a_query_and_records_what_it_shortened(env, tmp_path):
    big = "".join(f"line {i}: {'x' * 60}\n" for i in range(80))  # ~5.6k chars: well over MIN_CHARS
    model = ScriptedModel(
        [turn(call("edit_file", mode="create", path="notes.txt", file_text=big))]
        + [turn(call("view_file", path="notes.txt"))] * 6
        + [turn(call("finish", summary="x"))],
        context_tokens=8000,
    )
    # a counter independent of the prompts' sizes: 1000 tokens per long tool output, nothing else.
    # budget = 6800 - 2000 (a quarter for the answer) = 4800; a pass goes down to 80%: 3840
    model.count_tokens = lambda ms: sum(1000 for m in ms if m["role"] == "tool" and len(m["content"] or "") > 1000)
    _, result, records = run(env, tmp_path, [], model=model)
    assert result.stop_reason == "finished" and result.steps == 8
    trims = [r for r in records if r.type == "trim"]
    # before the 7th query five views (5000) are over: the two oldest go (3000); later, four fit
    assert len(trims) == 1 and trims[0].step == 6
    assert (trims[0].tokens_before, trims[0].tokens_after) == (5000, 3000)
    removed = trims[0].removed
    assert [(n["tool"], n["what"], n["call_id"]) for n in removed] == [
        ("view_file", "observation", "call-2-0"),
        ("view_file", "observation", "call-3-0"),
    ]
    seen = model.calls[6]["messages"]  # what the model was sent after the pass
    assert seen[:2] == model.calls[0]["messages"][:2]  # system and task untouched
    assert [seen[n["index"]]["tool_call_id"] for n in removed] == ["call-2-0", "call-3-0"]
    views = [m["content"] for m in seen if m["role"] == "tool"][1:]
    assert [v.startswith(OBSERVATION_MARK) for v in views] == [True, True, False, False, False]
    it_was = "it was view_file -> notes.txt: lines 1-80 of 80]"
    assert views[0] == f"{OBSERVATION_MARK} {removed[0]['chars']} chars; {it_was}"
    assert model.calls[7]["messages"][: len(seen)] == seen  # the trimmed history is kept, not rebuilt
    # the edit's source was never needed: the views were enough; the records keep every output whole
    assert json.loads(seen[2]["tool_calls"][0]["function"]["arguments"])["file_text"] == big
    assert all(
        r.observation.startswith("notes.txt: lines 1-80")
        for r in records
        if r.type == "tool_result" and r.name == "view_file"
    )
    assert_paired(seen)


RAMBLE = "I think the kernel should be faster because " * 40  # ~1.8k chars: a small model's reply


def test_fit_shortens_old_replies_then_the_latest_turns_and_says_what_is_left():
    messages = conversation()
    for m in messages:
        if m["role"] == "assistant":
            m["content"] = RAMBLE
    opening = chars(messages[:2]) + len("try float4 loads")
    # everything that may go, goes: every observation, source and reply, the latest turns included
    out, notes, tokens = fit_messages(messages, opening + 100, chars)
    assert tokens == chars(out) > opening + 100  # it cannot fit: what is left is said, the loop stops
    assert {n.what for n in notes} == {"observation", "source", "reply"}
    assert out[:2] == messages[:2] and out[-1] == messages[-1]  # system, task and the user's message whole
    assert all(m["content"] == f"{REPLY_MARK} {len(RAMBLE)} chars]" for m in out if m["role"] == "assistant")
    assert_paired(out)
    # a budget the old turns can meet leaves the latest KEEP_TURNS whole; one they cannot meet does not
    roomy = chars(messages) - 3 * len(LOG)
    out, notes, tokens = fit_messages(messages, roomy, chars)
    assert tokens <= roomy and protected(out) == protected(messages)
    tight = chars(protected(messages)) + 100
    out, notes, tokens = fit_messages(messages, tight, chars)
    assert tokens <= tight and protected(out) != protected(messages)
    latest = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    assert out[latest + 2]["content"] == LOG  # only as much as needed: the very latest result is whole
    # the notes replay onto the full history as the model saw it (resume, export)
    assert replay_trim(messages, [n.model_dump() for n in notes]) == out


def test_a_reply_without_calls_is_replayed_by_its_index():
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "T"},
        {"role": "assistant", "content": RAMBLE},
        {"role": "user", "content": "Format error"},
        {"role": "assistant", "content": RAMBLE},
    ]
    out, notes, _ = fit_messages(messages, chars(messages) - len(RAMBLE) + 100, chars)
    assert [(n.what, n.index, n.call_id) for n in notes] == [("reply", 2, "")]
    assert replay_trim(messages, [n.model_dump() for n in notes]) == out


def test_the_loop_stops_before_a_query_that_cannot_fit_and_says_which_flag_helps(env, tmp_path):
    model = ScriptedModel([turn(call("finish", summary="x"))], context_tokens=4096)
    model.count_tokens = lambda ms: 10_000 if any(m["role"] == "system" for m in ms) else 10
    _, result, records = run(env, tmp_path, [], model=model)
    assert result.stop_reason == "model_error:context_window" and model.calls == []  # never sent
    said = records[-1].error
    assert "the system prompt and the task need about 10010 tokens" in said and "\n" not in said
    assert "window of 4096 tokens" in said and "--context-tokens" in said and "--max-output-tokens" in said


def test_a_small_model_that_rambles_is_trimmed_not_stopped(env, tmp_path):
    """Long replies without an action: old replies are shortened, the run goes on to its own end."""
    rambles = [turn(content=RAMBLE * 2) for _ in range(2)]
    script = [*rambles, turn(call("list_files")), *rambles, turn(call("finish", summary="x"))]
    model = ScriptedModel(script, context_tokens=4096)  # budget 3481 - 1024 = 2457 tokens, approx_tokens
    model.count_tokens = lambda ms: approx_tokens(
        [{**m, "content": m["content"][:1000]} if m["role"] == "system" else m for m in ms]
    )  # whatever the system prompt's size
    _, result, records = run(env, tmp_path, [], model=model, max_format_errors=5)
    assert result.stop_reason == "finished", records[-1].error
    trims = [n for r in records if r.type == "trim" for n in r.removed]
    assert "reply" in {n["what"] for n in trims}
    assert all(approx_tokens(c["messages"][1:]) < 2457 for c in model.calls)
