import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """Each warp slides a 3-row window down a 128-column strip: every input row is read once."""

    def __init__(self, channels: int):
        super().__init__()
        # parameter container: conv.weight (C, 1, 3, 3), conv.bias (C,)
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=channels, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        y = torch.empty_like(x)
        kernels.depthwise_conv3x3(x, self.conv.weight, self.conv.bias, y, n, c, h, w)
        return y
