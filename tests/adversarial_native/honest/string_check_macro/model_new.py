import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """relu(x + bias) with bias broadcast over rows."""

    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cols = x.shape[-1]
        y = torch.empty_like(x)
        kernels.bias_relu(x, self.bias, y, x.numel() // cols, cols)
        return y
