import kernel_runtime
import torch
import torch.nn as nn

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)  # holds weight, bias, eps only

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.ln.weight.numel()
        y = torch.empty_like(x)
        kernels.layernorm_rows(x, self.ln.weight, self.ln.bias, y, x.numel() // hidden, hidden, self.ln.eps)
        return y
