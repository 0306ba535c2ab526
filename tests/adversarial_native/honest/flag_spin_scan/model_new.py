import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()

THREADS = 512


class ModelNew(nn.Module):
    """torch.cumsum(x, dim=0) for a 1-D x, one chained-scan launch."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        tiles = (n + THREADS - 1) // THREADS
        scratch_bytes = (1 + tiles) * 4 + tiles * 4
        scratch = torch.empty(scratch_bytes, dtype=torch.uint8, device=x.device)
        y = torch.empty_like(x)
        kernels.cumsum(x, y, n, scratch, scratch_bytes)
        return y
