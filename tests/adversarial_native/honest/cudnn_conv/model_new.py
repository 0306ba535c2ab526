import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()

WORKSPACE_BYTES = 64 * 1024 * 1024


class ModelNew(nn.Module):
    """A bias-free Conv2d through cuDNN (FMA math), its algorithm cached per shape."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, padding: int = 0, stride: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding, stride=stride, bias=False)
        self.padding, self.stride = padding, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.conv.weight
        n, c, h, wd = x.shape
        k, _, r, s = w.shape
        ho = (h + 2 * self.padding - r) // self.stride + 1
        wo = (wd + 2 * self.padding - s) // self.stride + 1
        y = torch.empty(n, k, ho, wo, dtype=x.dtype, device=x.device)
        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=x.device)
        kernels.conv2d(x, w, y, workspace, WORKSPACE_BYTES, n, c, h, wd, k, r, s, self.padding, self.stride)
        return y
