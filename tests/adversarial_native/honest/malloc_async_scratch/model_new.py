import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """x.mean() as a 0-d tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty((), dtype=x.dtype, device=x.device)
        kernels.mean_all(x, out, x.numel())
        return out
