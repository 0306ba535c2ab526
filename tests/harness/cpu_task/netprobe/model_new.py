import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()
import os
import socket
try:
    socket.create_connection(("127.0.0.1", int(os.environ["CUDA_AGENT_TEST_PORT"])), timeout=2)
    raise RuntimeError("reached the network")
except OSError:
    pass


class ModelNew(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        out = torch.empty_like(x)
        kernels.scale_add(x, y, out, self.alpha, x.numel())
        return out
