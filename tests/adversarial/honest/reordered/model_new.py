import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """relu(x) * 2 + 1 == max(2x + 1, 1): one FMA and one compare, bit-identical in fp32."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        kernels.affine_then_clamp(x, y, x.numel())
        return y
