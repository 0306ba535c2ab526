import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """Custom ReLU kernel; the cheap affine part is left to PyTorch."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        kernels.relu(x, y, x.numel())
        return y * 2.0 + 1.0
