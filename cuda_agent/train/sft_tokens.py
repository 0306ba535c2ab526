"""Conversations -> `input_ids` and `labels` for TRL's SFTTrainer, -100 on every token the model
did not write.

Why not TRL's conversational dataset with `assistant_only_loss=True` (TRL 1.16)? Its mask comes
from `{% generation %}` markers and covers every assistant turn alike (nothing reads a message's
`weight`, so turns a person or a script wrote would be trained); templates without the markers need
a patched copy TRL has for known families only (not SmolLM2's ChatML); and a `datasets.Dataset`
stores messages as Arrow structs, unifying tool-call `arguments` keys across rows (a `view_file`
call gains `"file_text": null`). TRL uses a pre-tokenised dataset's `labels` as they are, so we
render each conversation with the template ourselves and label the tokens of each trained assistant
turn: the text between the prompt with the generation prompt and the prompt with that turn. The
template is TRL's prefix-preserving training variant where it has one for the model's family (e.g.
Qwen3, whose own template rewrites earlier turns), the tokenizer's own otherwise; a conversation
whose earlier turns render differently once later ones follow is left out, with that reason.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from cuda_agent.train.sft_data import Conversation, model_turns, to_conversation

IGNORE = -100  # the label PyTorch's cross entropy (and TRL) skips
LongPolicy = Literal["truncate", "skip"]
ToolFormat = Literal["auto", "native", "text"]


class NotPrefixPreserving(ValueError):
    pass


@dataclass
class DataReport:
    rows: int = 0
    used: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason -> rows left out
    truncated: int = 0
    tokens: int = 0
    trained_tokens: int = 0
    untrained_turns: Counter = field(default_factory=Counter)  # reason -> assistant turns kept as context only
    forms: Counter = field(default_factory=Counter)  # "native" / "text" -> rows
    external_turns: int = 0  # trained turns an MCP client made: its tool calls, no text (export --include-external)

    def lines(self) -> list[str]:
        out = [
            f"{self.used} of {self.rows} run(s) used: {self.tokens} tokens, {self.trained_tokens} of them trained "
            f"(what the model wrote)"
        ]
        forms = {"native": "native tool calls", "text": "the text protocol (```action blocks)"}
        out += [f"{n} run(s) with {forms[f]}" for f, n in sorted(self.forms.items())]
        if self.truncated:
            out.append(f"{self.truncated} run(s) cut at max_length (the turns before the cut are trained)")
        if self.external_turns:
            out.append(f"{self.external_turns} trained turn(s) an MCP client made: its tool calls alone, no text")
        out += [f"left out {n}: {why}" for why, n in sorted(self.skipped.items())]
        out += [
            f"{n} assistant turn(s) kept as context, not trained: {why}"
            for why, n in sorted(self.untrained_turns.items())
        ]
        return out


def training_template(tokenizer) -> str | None:
    """TRL's training variant of the tokenizer's template where TRL has one; None: the tokenizer's own."""
    from trl.chat_template_utils import get_training_chat_template

    try:
        return get_training_chat_template(tokenizer)
    except ValueError:  # a family TRL has no patched template for
        return None


def renders_tool_calls(tokenizer, template: str | None) -> bool:
    """Whether the template shows a tool call, its arguments and its result (TRL's own probe)."""
    from trl.chat_template_utils import supports_tool_calling

    own = tokenizer.chat_template
    tokenizer.chat_template = own if template is None else template
    try:
        return supports_tool_calling(tokenizer)
    finally:
        tokenizer.chat_template = own


def _render(tokenizer, conv: Conversation, upto: int, template: str | None, generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(
        conv.messages[:upto],
        tools=conv.tools,
        chat_template=template,
        tokenize=False,
        add_generation_prompt=generation_prompt,
    )


def label(tokenizer, conv: Conversation, template: str | None) -> tuple[list[int], list[int]]:
    """Token ids of the whole conversation, and labels: the id inside a trained span, IGNORE elsewhere.
    A trained span is an assistant turn's text from after the generation prompt to the end of the turn
    (its end-of-turn token included: the model learns to stop)."""
    text = _render(tokenizer, conv, len(conv.messages), template)
    spans = []
    for i, trained in enumerate(conv.trained):
        if not trained:
            continue
        before = _render(tokenizer, conv, i, template, generation_prompt=True)
        through = _render(tokenizer, conv, i + 1, template)
        if not (through.startswith(before) and text.startswith(through)):
            raise NotPrefixPreserving(f"turn {i}")
        spans.append((len(before), len(through)))
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)  # the template wrote BOS etc.
    labels, k = [], 0
    for tid, (start, end) in zip(enc["input_ids"], enc["offset_mapping"]):
        while k < len(spans) and spans[k][1] <= start:
            k += 1
        inside = k < len(spans) and spans[k][0] <= start and end <= spans[k][1] and end > start
        labels.append(tid if inside else IGNORE)
    return list(enc["input_ids"]), labels


def build_dataset(
    rows: list[dict], tokenizer, *, max_length: int, long: LongPolicy = "truncate", tool_format: ToolFormat = "auto"
):
    """A `datasets.Dataset` of `input_ids` and `labels`, and the report of what went in.
    Too long: `truncate` keeps the start (the kept turns saw exactly their real context), unless no
    trained token is left; `skip` leaves the run out."""
    import datasets

    template = training_template(tokenizer)
    native = tool_format == "native" or (tool_format == "auto" and renders_tool_calls(tokenizer, template))
    report = DataReport(rows=len(rows))
    columns: dict[str, list] = {"input_ids": [], "labels": []}
    for row in rows:
        if not model_turns(row):
            report.skipped["no assistant turn the model wrote (all weight 0)"] += 1
            continue
        conv = to_conversation(row, native=native)
        if not any(conv.trained):
            report.skipped["no assistant turn the text protocol can show as the model wrote it"] += 1
            continue
        try:
            ids, labels = label(tokenizer, conv, template)
        except NotPrefixPreserving:
            report.skipped["the chat template renders earlier turns differently once later ones follow"] += 1
            continue
        except Exception as e:  # a template that rejects this conversation (role order, content types)
            report.skipped[f"the chat template failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}"] += 1
            continue
        if len(ids) > max_length:
            if long == "skip":
                report.skipped[f"longer than max_length {max_length} (--long skip)"] += 1
                continue
            ids, labels = ids[:max_length], labels[:max_length]
            if all(x == IGNORE for x in labels):
                report.skipped[f"the first trained turn starts past max_length {max_length}"] += 1
                continue
            report.truncated += 1
        report.used += 1
        report.forms[conv.form] += 1
        report.untrained_turns.update(conv.untrained)
        report.external_turns += conv.external
        report.tokens += len(ids)
        report.trained_tokens += sum(1 for x in labels if x != IGNORE)
        columns["input_ids"].append(ids)
        columns["labels"].append(labels)
    return datasets.Dataset.from_dict(columns), report
