import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """y = x @ W^T through cuBLAS, the handle made once by std::call_once."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight
        m, k, n = x.shape[0], x.shape[1], w.shape[0]
        y = torch.empty(m, n, dtype=x.dtype, device=x.device)
        kernels.linear(x, w, y, m, n, k)
        kernels.linear_local(x, w, y, m, n, k)
        return y
