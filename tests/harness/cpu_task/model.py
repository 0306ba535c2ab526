"""A small elementwise task for the CPU pipeline tests: out = alpha * x + y."""

import torch
import torch.nn as nn

N = 1 << 15


class Model(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        return self.alpha * x + y


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return [2.0]
