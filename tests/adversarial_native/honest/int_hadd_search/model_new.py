import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """torch.bucketize(x, boundaries)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, boundaries: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=torch.int64, device=x.device)
        kernels.bucketize(x, boundaries, boundaries.numel(), out, x.numel())
        return out
