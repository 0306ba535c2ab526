"""What a call leaves in the Model's parameters and buffers, read in the parent from the block it
lent: parameters must come back unchanged; a buffer the task's own forward updates (BatchNorm's
running statistics in training mode) must come back as the reference's forward left it from the
same start. The correctness phase checks each set's call; the timing phase each sampled call
(every buffer has a copy per rep there: batch.plan_layout)."""

from __future__ import annotations

from typing import Any

from cuda_agent.eval import batch as lay
from cuda_agent.eval.compare import compare_output
from cuda_agent.eval.context import EvalContext
from cuda_agent.eval.handover import Block
from cuda_agent.eval.plan import Plan
from cuda_agent.eval.verdict import Finding


def state_problem(
    ctx: EvalContext, block: Block, plan: Plan, layout: lay.Layout, rep: int = 0, *, shared: bool = True, when: str = ""
) -> Finding | None:
    """Rep `rep`'s state against the reference's forward on the same inputs, the last one
    `ctx.ref.outputs` ran. `shared=False`: its own buffers only (layout.per_rep), for a batch whose
    shared parameters are checked once. `when`: where, for the message ("during timing")."""
    wrong = []
    index: dict[str, int] = {}  # a parameter's or buffer's storage in the plan, by state_dict name
    for k, s in enumerate(plan.storages):
        if s.kind == "param" and s.name is not None:
            index.setdefault(s.name, k)
    # every buffer the reference's forward updated, whether or not this call touched it: one left
    # as it was is as wrong as one written wrongly
    changed = lay.changed_state(block, plan, layout, ctx.ref.state_dict, rep, copies=None if shared else True)
    names = dict.fromkeys([*changed, *ctx.ref.state_after])
    for name in names:
        i = index.get(name)
        if not (shared or i is None or i in layout.per_rep):
            continue  # a shared copy holds the whole batch's updates, not this call's
        after = ctx.ref.state_after.get(name)
        if after is None:
            wrong.append(f"{name} (read-only)")
            continue
        if i is None:  # the plan never reads or writes it: it stays as the task began
            mine = lay.storage_bytes(ctx.ref.state_dict[name])
        else:
            mine = block.region(layout.reps[rep][i], plan.storages[i].nbytes)
        view = _as_buffer(mine, ctx.ref.state_dict[name])
        if view is None or not compare_output(0, view, after, None, ctx.cfg.tolerances).ok:
            wrong.append(f"{name} (not what the task's forward leaves)")
        elif not moved(view, ctx.ref.state_dict[name], after):
            wrong.append(f"{name} (the task's forward updates it; this call did not, or only in part)")
    if not wrong:
        return None
    return Finding(
        guard="state_write",
        message=(
            f"forward's parameters or buffers of Model are not as the task's forward leaves them"
            f"{' ' + when if when else ''}: {', '.join(wrong)}; "
            "parameters are read-only (keep scratch data in allocations of forward's own), and a buffer the task's "
            "forward updates (BatchNorm's running statistics in training mode) must be updated the same way"
        ),
    )


def _as_buffer(mine: Any, like: Any) -> Any:
    """The block's bytes of a buffer's storage viewed as the task's buffer `like` is (its dtype, shape,
    strides and offset: a buffer may be registered transposed); None where they cannot hold it."""
    size = like.element_size()
    if mine.numel() % size or mine.numel() < like.untyped_storage().nbytes():
        return None
    typed = mine.view(like.dtype)  # as_strided's offset counts from its storage's start, not the view's
    return typed.as_strided(like.shape, like.stride(), typed.storage_offset() + like.storage_offset())


def moved(mine: Any, before: Any, after: Any) -> bool:
    """Whether a call took a buffer at least half way from where the task began to where the task's
    forward left it (normwise), where that step is more than rounding. The outputs' tolerance alone
    let a BatchNorm candidate skip its update: with momentum 0.01 and a large batch the whole step is
    below its absolute 1e-4."""
    import torch

    if not after.is_floating_point():
        return True  # compared exactly already (num_batches_tracked)
    eps = torch.finfo(after.dtype).eps
    # over the entries finite before and after: an entry that stays -inf (a running maximum) or NaN
    # has no step, and the output comparison has judged it already
    finite = before.isfinite() & after.isfinite()
    mine, before, after = mine.double()[finite], before.double()[finite], after.double()[finite]
    step = float((after - before).norm())
    rounding = 64 * eps * float(after.norm())  # what honest arithmetic in its dtype may differ by, and more
    return step <= rounding or float((mine - after).norm()) <= 0.5 * step
