import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """A cubic in x with coefficients a^i / (i + 1), one pass over memory."""

    def __init__(self, a: float):
        super().__init__()
        self.a = a

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        kernels.poly(x, y, x.numel(), self.a)
        return y
