"""cuda-agent: turn a PyTorch module into a verified, faster custom CUDA kernel."""

__version__ = "0.1.0"
