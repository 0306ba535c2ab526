import kernel_runtime
import torch
import torch.nn as nn

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        kernels.relu_affine(x, y, x.numel())
        return y
