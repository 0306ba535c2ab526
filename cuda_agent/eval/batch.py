"""One batch of calls laid out in a lent block (handover.py): where each rep's inputs, the
parameters and each rep's allocations live, how the parent fills the block before it lends it,
and the views it reads back after. Parent side only; the judge gets the offsets and a plan.

A rep's storages follow the plan's storage list: an input's bytes (its whole storage, as
forward sees it), a parameter's (one copy per batch, shared by its reps), a buffer's (in timed
batches a copy per rep, so that each sampled call's update can be checked against the
reference's from the same start), or an allocation (poisoned: unwritten bytes stay
NaN). Baselines have no plan: their reps hold the task's tensor inputs only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cuda_agent.eval.checks import OutputMeta
from cuda_agent.eval.handover import Block, pack, strided, typed
from cuda_agent.eval.plan import Plan, Storage
from cuda_agent.eval.protocol import LayoutSpec

POISON_BYTE = 0xFF  # NaN in every float dtype, the extreme in the integer ones


@dataclass
class Layout:
    nbytes: int
    reps: list[list[int]]  # per rep: one offset per storage (a plan's, or the task's tensor inputs)
    sizes: list[int]  # bytes per storage
    per_rep: frozenset[int] = frozenset()  # parameter storages with a copy per rep (buffers, in timed batches)

    def request(self) -> LayoutSpec:
        """The layout as the judge is told it (Prepare, PrepareReference)."""
        return LayoutSpec(nbytes=self.nbytes, reps=self.reps, sizes=self.sizes)


def plan_layout(plan: Plan, reps: int, copied: frozenset[str] | set[str] = frozenset()) -> Layout:
    """Parameters once, then each rep's inputs and allocations, and its own copy of each parameter
    or buffer named in `copied` (the timing phase: every buffer of the task's Model)."""
    sizes = [s.nbytes for s in plan.storages]
    per_rep = frozenset(i for i, s in enumerate(plan.storages) if s.kind == "param" and s.name in copied)
    shared = [i for i, s in enumerate(plan.storages) if s.kind == "param" and i not in per_rep]
    own = [i for i, s in enumerate(plan.storages) if s.kind != "param" or i in per_rep]
    offsets, total = pack([sizes[i] for i in shared] + [sizes[i] for _ in range(reps) for i in own])
    shared_at = dict(zip(shared, offsets))
    rows, k = [], len(shared)
    for _ in range(reps):
        row = [0] * len(sizes)
        for i in shared:
            row[i] = shared_at[i]
        for i in own:
            row[i] = offsets[k]
            k += 1
        rows.append(row)
    return Layout(total, rows, sizes, per_rep)


def input_layout(tensor_bytes: list[int], reps: int) -> Layout:
    """Each rep's tensor inputs (their storages), for a baseline."""
    offsets, total = pack([n for _ in range(reps) for n in tensor_bytes])
    n = len(tensor_bytes)
    return Layout(total, [offsets[r * n : (r + 1) * n] for r in range(reps)], list(tensor_bytes))


def storage_bytes(t: Any):
    """A tensor's whole storage as uint8 (what a plan's pointers index)."""
    import torch

    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def tensor_inputs(inputs: list) -> list:
    """The tensors of an input set, in order (nested tuples and lists walked), as a baseline lays them out."""
    import torch

    out: list = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (tuple, list)):
            out += tensor_inputs(list(x))
    return out


def _index(s: Storage) -> int:
    """An input storage's position in the input set (a checked plan's always has one: plan.check_plan)."""
    if s.index is None:
        raise ValueError("an input storage without its input's position: the plan was not checked")
    return s.index


def _name(s: Storage) -> str:
    """A parameter storage's state_dict name (a checked plan's always has one: plan.check_plan)."""
    if s.name is None:
        raise ValueError("a parameter storage without its name: the plan was not checked")
    return s.name


def fill_plan_rep(block: Block, plan: Plan, layout: Layout, rep: int, inputs: list, state: dict) -> None:
    """Rep `rep`'s inputs copied in, its allocations poisoned and its own buffers (layout.per_rep)
    set to the task's starting `state` (shared parameters: fill_params)."""
    row = layout.reps[rep]
    for i, s in enumerate(plan.storages):
        if s.kind == "input":
            block.region(row[i], s.nbytes).copy_(storage_bytes(inputs[_index(s)]))
        elif s.kind == "alloc":
            block.region(row[i], s.nbytes).fill_(POISON_BYTE)
        elif i in layout.per_rep:
            block.region(row[i], s.nbytes).copy_(storage_bytes(state[_name(s)]))


def fill_params(block: Block, plan: Plan, layout: Layout, state: dict) -> None:
    """The parameters and buffers a batch's reps share, once."""
    row = layout.reps[0]
    for i, s in enumerate(plan.storages):
        if s.kind == "param" and i not in layout.per_rep:
            block.region(row[i], s.nbytes).copy_(storage_bytes(state[_name(s)]))


def fill_input_rep(block: Block, layout: Layout, rep: int, inputs: list) -> None:
    for off, t in zip(layout.reps[rep], tensor_inputs(inputs)):
        block.region(off, t.untyped_storage().nbytes()).copy_(storage_bytes(t))


def output_views(block: Block, plan: Plan, layout: Layout, rep: int) -> list:
    """Rep `rep`'s outputs as the plan says forward returns them, viewing the block."""
    row = layout.reps[rep]
    return [
        strided(typed(block.region(row[o.storage], layout.sizes[o.storage]), o.dtype), o.shape, o.stride, o.offset)
        for o in plan.outputs
    ]


def output_meta(plan: Plan) -> list[OutputMeta]:
    """What the checks compare with the reference's outputs: the checked plan's own output views."""
    return [
        OutputMeta(plain=True, type="Tensor", shape=list(o.shape), stride=list(o.stride), dtype=o.dtype)
        for o in plan.outputs
    ]


def snapshot(block: Block, plan: Plan, layout: Layout, rep: int, into: list | None = None) -> list:
    """Copies of rep `rep`'s outputs, made the moment the judge says it is done: what it writes
    after that cannot count. `into`: buffers of the outputs' shapes to copy into (allocated once,
    outside the clock: an allocation inside it after the allocator gave its cache back costs
    about a millisecond on an H200, which a calibration cannot know)."""
    views = output_views(block, plan, layout, rep)
    if into is None:
        return [v.clone() for v in views]
    for dst, v in zip(into, views):
        dst.copy_(v)
    return into


COMPARE_SLICE = 1 << 24  # bytes compared at once: no temporary the size of a large input beside it


def same_bytes(region: Any, other: Any) -> bool:
    """Whether two byte views hold the same bytes (NaNs and all), compared a slice at a time."""
    from cuda_agent.eval.tensor_walk import chunks

    if region.numel() != other.numel():
        raise ValueError(f"comparing {region.numel()} bytes with {other.numel()}: not the same storage layout")
    return all(bool((a == b).all()) for a, b in chunks([region, other], [0], COMPARE_SLICE))


def changed_inputs(block: Block, plan: Plan, layout: Layout, rep: int, fresh: list) -> list[int]:
    """Inputs of rep `rep` whose bytes in the block are no longer those of a fresh draw."""
    row = layout.reps[rep]
    return sorted(
        {
            _index(s)
            for i, s in enumerate(plan.storages)
            if s.kind == "input" and not same_bytes(block.region(row[i], s.nbytes), storage_bytes(fresh[_index(s)]))
        }
    )


def changed_state(
    block: Block, plan: Plan, layout: Layout, state: dict, rep: int = 0, *, copies: bool | None = None
) -> list[str]:
    """Parameters and buffers whose copy in the block (rep `rep`'s, where it has its own) the batch
    changed; `copies`: True, of those with a copy per rep only (layout.per_rep); False, of those
    the reps share only; None, of all."""
    row = layout.reps[rep]
    return [
        _name(s)
        for i, s in enumerate(plan.storages)
        if s.kind == "param"
        and copies in (None, i in layout.per_rep)
        and not same_bytes(block.region(row[i], s.nbytes), storage_bytes(state[_name(s)]))
    ]
