import kernel_runtime
import torch
import torch.nn as nn

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """cuBLAS SGEMM (default fp32 math), then bias + ReLU in one pass."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = x.shape[-1]
        n = self.linear.out_features
        m = x.numel() // k
        y = x.new_empty(x.shape[:-1] + (n,))
        kernels.gemm_bias_relu(x, self.linear.weight, self.linear.bias, y, m, n, k)
        return y
