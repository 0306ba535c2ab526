import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()

DTYPE_CODES = {torch.float32: 0, torch.float64: 1}


class ModelNew(nn.Module):
    """torch.clamp(x, lo, hi) for float32 and float64."""

    def __init__(self, lo: float, hi: float):
        super().__init__()
        self.lo = lo
        self.hi = hi

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        code = DTYPE_CODES.get(x.dtype)
        if code is None:
            raise TypeError(f"unsupported dtype {x.dtype}")
        y = torch.empty_like(x)
        kernels.clamp_any(x, y, x.numel(), code, self.lo, self.hi)
        return y
