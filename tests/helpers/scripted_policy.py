"""A scripted policy for GRPO tests: it stands in for sampling only. The tiny model's `generate`
answers each rollout with the next turn of a fixed script (tool calls in the model's own chat format,
parsed by TRL like any generation), while its forward pass stays the real one: the log-probabilities,
the loss and the gradient are the model's own on those tokens. A random tiny model never writes a tool
call, so without this no rollout would reach the judge; with it, a test chooses what each rollout of
a group does (one writes a correct kernel, one a wrong one) and checks what the judge made of it.

Turn 1 of the rollouts of a batch: row i gets script i (rollouts of one group are consecutive rows).
A later turn: the script whose first turn the row's history holds, at the turn the history has
reached (its count of assistant turns).
"""

from __future__ import annotations

import json


def tool_calls_text(*calls: tuple[str, dict]) -> str:
    """An assistant turn of tool calls in the Qwen2.5 / tiny model's template (<tool_call> blocks)."""
    return "\n".join(f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls)


class ScriptedPolicy:
    def __init__(self, tokenizer, scripts: list[list[str]]):
        self.tok, self.scripts = tokenizer, scripts
        self.calls: list[int] = []  # rows per generate call

    def __call__(self, model, input_ids=None, attention_mask=None, **kwargs):
        import torch

        end = self.tok.eos_token  # <|im_end|>: the end of a turn
        rows = []
        for i, (ids, mask) in enumerate(zip(input_ids, attention_mask)):
            history = self.tok.decode(ids[mask.bool()])
            turn = history.count("<|im_start|>assistant") - 1  # the prompt ends with the generation prompt
            if turn == 0:
                script = self.scripts[i % len(self.scripts)]
            else:
                script = next(s for s in self.scripts if s[0] in history)
            text = script[turn] if turn < len(script) else "I am done."
            rows.append(self.tok(text + end, add_special_tokens=False)["input_ids"])
        self.calls.append(len(rows))
        width = max(map(len, rows))
        pad = self.tok.pad_token_id
        new = torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=input_ids.dtype, device=input_ids.device)
        return torch.cat([input_ids, new], dim=1)
