import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """y = x @ W^T through cuBLAS, once per way of keeping the handle."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight
        m, k, n = x.shape[0], x.shape[1], w.shape[0]
        outs = [torch.empty(m, n, dtype=x.dtype, device=x.device) for _ in range(4)]
        kernels.linear_lazy(x, w, outs[0], m, n, k)
        kernels.linear_lambda(x, w, outs[1], m, n, k)
        kernels.linear_made(x, w, outs[2], m, n, k)
        kernels.linear_file_scope(x, w, outs[3], m, n, k)
        return outs[3]
