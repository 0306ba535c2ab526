import kernel_runtime
import torch
import torch.nn as nn

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        inner = x[0, 0].numel()
        kernels.rmsnorm_features(x, y, x.shape[0], self.num_features, inner, self.eps)
        return y
