import torch
import torch.nn as nn

BATCH = 8192
HIDDEN = 4096


class Model(nn.Module):
    """LayerNorm over the last dimension, with a learned weight and bias."""

    def __init__(self, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        # Non-trivial affine parameters, so a kernel that ignores weight or bias cannot pass.
        with torch.no_grad():
            self.ln.weight.normal_(1.0, 0.5)
            self.ln.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    # An offset and a scale per row, so the mean and variance matter.
    return [torch.randn(BATCH, HIDDEN) * 3.0 + 1.0]


def get_init_inputs():
    return [HIDDEN]
