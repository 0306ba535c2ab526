import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    """nn.Embedding lookup."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.emb = nn.Embedding(num_embeddings, embedding_dim)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        table = self.emb.weight
        n_rows, dim = table.shape
        out = torch.empty(*idx.shape, dim, dtype=table.dtype, device=table.device)
        kernels.embedding(table, idx, out, idx.numel(), n_rows, dim)
        return out
