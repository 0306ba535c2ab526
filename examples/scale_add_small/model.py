import torch
import torch.nn as nn

N = 1 << 20


class Model(nn.Module):
    """out = x * 2 + y. Small on purpose: a quick task for timing the edit-to-verdict loop."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * 2 + y


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
