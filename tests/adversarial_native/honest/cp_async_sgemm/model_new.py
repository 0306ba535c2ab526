from typing import Optional

import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """C = A @ B in fp32 with a cp.async double-buffered SGEMM."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        m, k = a.shape
        k2, n = b.shape
        if k != k2:
            raise ValueError(f"inner dimensions differ: {k} vs {k2}")
        c = torch.empty((m, n), dtype=a.dtype, device=a.device)
        kernels.sgemm(a, b, c, m, n, k)
        return c
