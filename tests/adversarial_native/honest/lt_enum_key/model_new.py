import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()

WORKSPACE_BYTES = 32 * 1024 * 1024


class ModelNew(nn.Module):
    """y = x @ W^T through cuBLASLt in fp32."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight
        m, k = x.shape
        n = w.shape[0]
        y = torch.empty(m, n, dtype=x.dtype, device=x.device)
        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=x.device)
        kernels.linear_lt_ops(x, w, y, workspace, WORKSPACE_BYTES, m, n, k)
        return y
