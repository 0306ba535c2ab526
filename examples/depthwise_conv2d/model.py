import torch
import torch.nn as nn

BATCH = 16
CHANNELS = 256
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    """Depthwise 3x3 convolution (groups = channels), stride 1, zero padding 1, with bias."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=channels, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]
