import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        return torch.add(y, x, alpha=self.alpha)
