"""Walking same-shape tensors in aligned 1-D chunks, in memory order, so a comparison over any
output size holds only a few chunk-sized temporaries at once."""

from __future__ import annotations

from collections.abc import Iterator

import torch


def real_view(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t) if t.is_complex() else t  # a view: complex as (re, im) pairs


def walk_order(t: torch.Tensor) -> list[int]:
    """Dims from the largest stride to the smallest: memory order for a dense tensor."""
    return sorted(range(t.dim()), key=lambda d: (-t.stride(d), -t.shape[d]))


def chunks(tensors: list[torch.Tensor], perm: list[int], limit: int) -> Iterator[list[torch.Tensor]]:
    """Aligned 1-D chunks of same-shape tensors of at most about `limit` elements.

    Walking in the first tensor's memory order makes each chunk a view of it; a slice of
    another tensor is copied only when it can't be viewed flat.
    """

    def walk(ts: list[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
        n = ts[0].numel()
        if n == 0:
            return
        if n <= limit or ts[0].dim() == 0:
            yield [t.reshape(-1) for t in ts]
            return
        row = n // ts[0].shape[0]
        if row > limit:  # one slice along dim 0 is already too big: go one level down
            for i in range(ts[0].shape[0]):
                yield from walk([t[i] for t in ts])
            return
        step = limit // row
        for i in range(0, ts[0].shape[0], step):
            yield [t[i : i + step].reshape(-1) for t in ts]

    yield from walk([t.permute(perm) for t in tensors])


def index_of(pos: int, shape: tuple[int, ...], perm: list[int]) -> list[int]:
    """Turn a position in the walk order back into an index of the original shape."""
    walked = []
    for d in reversed(perm):
        walked.append(pos % shape[d])
        pos //= shape[d]
    idx = [0] * len(shape)
    for d, i in zip(reversed(perm), walked):
        idx[d] = i
    return idx


def is_exact(dtype: torch.dtype) -> bool:
    """Integer and bool dtypes: compared exactly, never through float64."""
    return not (dtype.is_floating_point or dtype.is_complex)
