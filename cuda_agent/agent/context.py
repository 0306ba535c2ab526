"""Keeping the conversation inside the model's context window.

When the history outgrows its budget, the stalest bulk goes first: old tool outputs, then kernel
sources in old edit_file calls (the file on disk is the truth and view_file shows it again), then
the text of old replies, oldest first within each kind, only until the history is back under the
target. Never touched: the opening messages (system prompt, task) and user messages; the latest
`keep_turns` turns only when nothing else is left (`fit_messages`: 3, then 1, then none). A
shortened message keeps its tool_call_id or its calls, so every result still answers its call. If
what is never touched is still over budget, the loop stops the run before the query
(model_error:context_window) with `too_long`'s advice: which flag or model would help. Trimming works
on a copy and is idempotent; the trajectory keeps every full observation and argument, and
`replay_trim` applies a `trim` record's notes to the full history again (agent/history.py).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Callable, Literal

from pydantic import BaseModel

if TYPE_CHECKING:
    from cuda_agent.agent.interfaces import Model

TokenCounter = Callable[[list[dict]], int]

FRACTION = 0.85  # of the window the history may fill: token counts are estimates
ANSWER_TOKENS = 4096  # room kept for the model's answer when its client sets no max_tokens
KEEP_TURNS = 3  # the latest turns are never shortened
MIN_CHARS = 400  # shorter texts stay: their note would save next to nothing
SOURCE_TOOLS = {"edit_file"}
SOURCE_FIELDS = ("file_text", "new_str", "old_str")
OBSERVATION_MARK = "[observation trimmed:"
SOURCE_MARK = "[source trimmed:"
REPLY_MARK = "[reply trimmed:"
SHRINK_TURNS = (KEEP_TURNS, 1, 0)  # fit_messages: the latest turns kept whole, then fewer
CHARS_PER_TOKEN = 3.5


class TrimNote(BaseModel):
    """One shortened text: where it was and how much went (a `trim` record's `removed` entry)."""

    index: int  # position of the message in the list that was trimmed
    role: Literal["tool", "assistant"]
    tool: str
    call_id: str
    what: Literal["observation", "source", "reply"]
    field: str | None = None  # the argument, for a source
    chars: int  # length of the text that was replaced


def approx_tokens(messages: list[dict]) -> int:
    """About len(text) / 3.5 tokens, plus a few per message for the role and framing."""
    chars = 0
    for m in messages:
        content = m.get("content")
        chars += len(content) if isinstance(content, str) else len(json.dumps(content)) if content else 0
        for c in m.get("tool_calls") or []:
            chars += len(c["function"]["name"]) + len(c["function"].get("arguments") or "")
    return math.ceil(chars / CHARS_PER_TOKEN) + 4 * len(messages)


def counter_for(model: Model) -> TokenCounter:
    """The model's own counter (Model.count_tokens), approx_tokens where it answers None."""

    def count(messages: list[dict]) -> int:
        own = model.count_tokens(messages)
        return approx_tokens(messages) if own is None else own

    return count


def budget_parts(model: Model, tools: list[dict], count_tokens: TokenCounter) -> tuple[int, int, int] | None:
    """(window, tokens kept for the answer, tokens of the tool schemas), or None: the window is unknown."""
    window = model.context_window()
    if not window:
        return None
    answer = model.max_tokens or ANSWER_TOKENS
    answer = min(answer, window // 4)  # a small window still leaves room for the history
    schemas = count_tokens([{"role": "system", "content": json.dumps(tools)}]) if tools else 0
    return window, answer, schemas


def context_budget(model: Model, tools: list[dict], count_tokens: TokenCounter) -> int | None:
    """Tokens the history may take: FRACTION of the window, less room for the answer and the tool
    schemas sent with every request; None when the model does not say its window."""
    if (parts := budget_parts(model, tools, count_tokens)) is None:
        return None
    window, answer, schemas = parts
    return max(0, int(window * FRACTION) - answer - schemas)


_WINDOW_FROM = {
    "context_tokens": "given by --context-tokens",
    "server": "as its server reports it",
    "litellm": "from litellm's table",
    "model": "as the model says",
}


def too_long(model: Model, tools: list[dict], count_tokens: TokenCounter, needed: int, budget: int, turns: int) -> str:
    """One line for a conversation that does not fit even trimmed: the sizes, and which flag or model would help."""
    window, answer, schemas = budget_parts(model, tools, count_tokens) or (0, 0, 0)
    source = model.window_source
    what = (
        "the system prompt and the task need"
        if turns == 0
        else "the conversation needs, with every old observation and reply trimmed,"
    )
    given = model.max_tokens
    fixes = [
        "give a larger --context-tokens if the server has more (llama.cpp: start it with a larger --n_ctx)"
        if source == "context_tokens"
        else "start the server with a larger window and give it as --context-tokens N",
        f"a smaller --max-output-tokens ({answer} tokens are kept for the reply{'' if given else ' by default'})",
        "or a model with a larger window",
    ]
    return (
        f"{what} about {needed} tokens, more than {model.name}'s window of {window} tokens "
        f"({_WINDOW_FROM.get(source, 'as the model says')}) leaves for them: {budget} "
        f"({FRACTION:.0%} of it, less {answer} for the reply and {schemas} for the tool schemas); " + ", ".join(fixes)
    )


def fit_messages(
    messages: list[dict],
    budget_tokens: int,
    count_tokens: TokenCounter = approx_tokens,
    *,
    target_tokens: int | None = None,
) -> tuple[list[dict], list[TrimNote], int]:
    """`messages` trimmed to `budget_tokens`, the latest turns kept whole while that is enough
    (SHRINK_TURNS), what was shortened, and the tokens left (over the budget: it cannot fit)."""
    out, notes = messages, []
    for keep in SHRINK_TURNS:
        out, more, tokens = _trim(out, budget_tokens, count_tokens, target_tokens, keep)
        notes += more
        if tokens <= budget_tokens:
            break
    return out, notes, tokens


def trim_messages(
    messages: list[dict],
    budget_tokens: int,
    count_tokens: TokenCounter = approx_tokens,
    *,
    target_tokens: int | None = None,
    keep_turns: int = KEEP_TURNS,
) -> tuple[list[dict], list[TrimNote]]:
    """`messages` shortened when over `budget_tokens`, down to `target_tokens` (default: the budget;
    a lower target makes passes rarer), and what was shortened. The input is not changed."""
    out, notes, _ = _trim(messages, budget_tokens, count_tokens, target_tokens, keep_turns)
    return out, notes


def _trim(
    messages: list[dict], budget_tokens: int, count_tokens: TokenCounter, target_tokens: int | None, keep_turns: int
) -> tuple[list[dict], list[TrimNote], int]:
    counts = [count_tokens([m]) for m in messages]
    out = list(messages)
    if sum(counts) <= budget_tokens:
        return out, [], sum(counts)
    target = budget_tokens if target_tokens is None else min(target_tokens, budget_tokens)
    start, stop = _open_span(messages, keep_turns)
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or []}
    notes: list[TrimNote] = []
    for shorten in (_shorten_observation, _shorten_sources, _shorten_reply):  # every old observation first
        for i in range(start, stop):
            if sum(counts) <= target:
                return out, notes, sum(counts)
            new, found = shorten(out[i], i, names)
            if found:
                out[i], counts[i] = new, count_tokens([new])
                notes.extend(found)
    return out, notes, sum(counts)


def _open_span(messages: list[dict], keep_turns: int) -> tuple[int, int]:
    """[start, stop): from the first assistant message (after the opening ones) to the first
    message of the latest `keep_turns` turns; a turn starts at an assistant message."""
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if len(turns) <= keep_turns:
        return 0, 0
    return turns[0], (turns[-keep_turns] if keep_turns > 0 else len(messages))


def _shorten_observation(m: dict, i: int, names: dict[str, str]) -> tuple[dict, list[TrimNote]]:
    content = m.get("content")
    if (
        m.get("role") != "tool"
        or not isinstance(content, str)
        or len(content) < MIN_CHARS
        or content.startswith(OBSERVATION_MARK)
    ):
        return m, []
    tool = names.get(m.get("tool_call_id", ""), "?")
    status = next((line.strip() for line in content.splitlines() if line.strip()), "")
    status = status if len(status) <= 120 else status[:117] + "..."
    note = f"{OBSERVATION_MARK} {len(content)} chars; it was {tool} -> {status}]"
    return {**m, "content": note}, [
        TrimNote(
            index=i, role="tool", tool=tool, call_id=m.get("tool_call_id", ""), what="observation", chars=len(content)
        )
    ]


def _shorten_sources(m: dict, i: int, names: dict[str, str]) -> tuple[dict, list[TrimNote]]:
    if m.get("role") != "assistant" or not m.get("tool_calls"):
        return m, []
    calls, notes = [], []
    for c in m["tool_calls"]:
        fn = c["function"]
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except json.JSONDecodeError:
            args = None  # a malformed call is left as the model wrote it
        if fn["name"] not in SOURCE_TOOLS or not isinstance(args, dict):
            calls.append(c)
            continue
        changed = False
        for field in SOURCE_FIELDS:
            value = args.get(field)
            if isinstance(value, str) and len(value) >= MIN_CHARS and not value.startswith(SOURCE_MARK):
                args[field] = f"{SOURCE_MARK} {len(value)} chars]"
                notes.append(
                    TrimNote(
                        index=i,
                        role="assistant",
                        tool=fn["name"],
                        call_id=c["id"],
                        what="source",
                        field=field,
                        chars=len(value),
                    )
                )
                changed = True
        calls.append({**c, "function": {**fn, "arguments": json.dumps(args, ensure_ascii=False)}} if changed else c)
    return ({**m, "tool_calls": calls} if notes else m), notes


def _shorten_reply(m: dict, i: int, names: dict[str, str]) -> tuple[dict, list[TrimNote]]:
    """An old reply's text (a small model's rambling, a text-protocol action already answered); its
    calls stay, so their results still answer them."""
    content = m.get("content")
    if (
        m.get("role") != "assistant"
        or not isinstance(content, str)
        or len(content) < MIN_CHARS
        or content.startswith(REPLY_MARK)
    ):
        return m, []
    first = (m.get("tool_calls") or [{}])[0]
    note = TrimNote(
        index=i,
        role="assistant",
        tool=first.get("function", {}).get("name", ""),
        call_id=first.get("id", ""),
        what="reply",
        chars=len(content),
    )
    return {**m, "content": f"{REPLY_MARK} {len(content)} chars]"}, [note]


def replay_trim(messages: list[dict], removed: list[dict]) -> list[dict]:
    """`messages` (the history rebuilt from the trajectory) shortened as a `trim` record's `removed`
    notes say, with the same shortening the loop made, so the texts are the ones the model was sent.
    A note whose message is not at its index (a history rebuilt from a damaged trajectory) is looked
    up by its call id; one found nowhere is passed over. The input is not changed."""
    out = list(messages)
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or []}
    for note in removed:
        role, call_id = note.get("role"), note.get("call_id", "")
        if (i := _find(out, note.get("index", -1), role, call_id)) is not None:
            shorten = {"observation": _shorten_observation, "reply": _shorten_reply}.get(
                note.get("what", ""), _shorten_sources
            )
            out[i] = shorten(out[i], i, names)[0]
    return out


def _find(messages: list[dict], index: int, role: str | None, call_id: str) -> int | None:
    def holds(m: dict) -> bool:
        if m.get("role") != role:
            return False
        if role == "tool":
            return m.get("tool_call_id") == call_id
        if not call_id:  # a reply that made no call: only its index tells
            return True
        return any(c.get("id") == call_id for c in m.get("tool_calls") or [])

    if 0 <= index < len(messages) and holds(messages[index]):
        return index
    if not call_id:
        return None
    return next((i for i, m in enumerate(messages) if holds(m)), None)
