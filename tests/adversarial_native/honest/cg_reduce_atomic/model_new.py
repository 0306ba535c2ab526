import math

import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """(x ** 2).sum() as a 0-d tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = math.prod(x.shape)
        out = torch.empty((), dtype=torch.float32, device=x.device)
        kernels.sum_of_squares(x, out, n)
        return out
