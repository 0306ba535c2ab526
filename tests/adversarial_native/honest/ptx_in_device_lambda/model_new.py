import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """x.sum(dim=-1) for a 2-D x, one warp per row."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:
            raise ValueError(f"expected a 2-D input, got {x.dim()} dims")
        rows, cols = x.shape
        out = torch.empty(rows, dtype=x.dtype, device=x.device)
        kernels.row_sum(x, out, rows, cols)
        return out
