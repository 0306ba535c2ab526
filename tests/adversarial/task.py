"""The task every adversarial candidate attacks: y = relu(x) * 2 + 1 on a 4096 x 1024 fp32 tensor.

KernelBench format. Outputs are >= 1, so an all-zero or poisoned output can never pass, and
the op is exact in fp32 (2x is exact, +1 rounds once), so an honest kernel matches bit for bit.
"""

import torch
import torch.nn as nn

ROWS = 4096
COLS = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2.0 + 1.0


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
