import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """scale * softmax(x, dim=-1), one block per row."""

    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows, cols = x.shape
        y = torch.empty(rows, cols, dtype=x.dtype, device=x.device)
        kernels.softmax(x, y, rows, cols, self.scale)
        return y
