import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """Exact GELU, one pass over memory."""

    def __init__(self):
        super().__init__()

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.is_contiguous() and x.dtype == torch.float32, "expects a contiguous fp32 tensor"
        y = torch.empty_like(x)
        kernels.gelu_forward(x, y, x.numel())
        return y
