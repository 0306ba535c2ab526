import torch
import torch.nn as nn
import torch.nn.functional as F
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """F.relu6(x), one pass."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        kernels.relu6(x, y, x.numel())
        return y
