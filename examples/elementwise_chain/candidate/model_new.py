import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """The whole chain in one pass over memory: one read of x, one write of y."""

    def __init__(self, scale: float, shift: float, clamp_val: float):
        super().__init__()
        self.scale = scale
        self.shift = shift
        self.clamp_val = clamp_val

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        kernels.elementwise_chain(x, y, x.numel(), self.scale, self.shift, self.clamp_val)
        return y
