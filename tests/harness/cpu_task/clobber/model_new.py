import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """Writes the right output, then clobbers its input (a const pointer cast away)."""

    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        out = torch.empty_like(x)
        kernels.scale_add_clobber(x, y, out, self.alpha, x.numel())
        return out
