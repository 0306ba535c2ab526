import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """One block per row: the row is read once into registers, normalised, written once."""

    def __init__(self, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)  # only holds ln.weight / ln.bias / eps; its forward is never called

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = x.shape[-1]
        y = torch.empty_like(x)
        kernels.layernorm_forward(x, self.ln.weight, self.ln.bias, y, x.numel() // hidden, hidden, self.ln.eps)
        return y
