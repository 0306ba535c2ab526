import torch
import torch.nn as nn
import kernel_runtime
import triton
import triton.language as tl

kernels = kernel_runtime.load_kernels()


@triton.jit
def _relu_affine(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(v, 0.0) * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        n = x.numel()
        _relu_affine[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
