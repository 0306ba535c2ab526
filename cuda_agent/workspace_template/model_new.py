"""ModelNew: the optimised version of Model (model.py), computed by your CUDA kernels.

Give ModelNew exactly the __init__ arguments of Model and the same parameters and buffers under the
same names (Model's state_dict is loaded into it strictly). forward may only allocate outputs
(torch.empty*), take views and call the launchers of kernels/*.cu through `kernels`, e.g.
`kernels.my_op(x, out, x.numel())`; the CUDA stream is passed for you. SKILL.md has the rules.
"""

import kernel_runtime
import torch
import torch.nn as nn

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("ModelNew.forward is not written yet: write kernels/*.cu and call them here")
