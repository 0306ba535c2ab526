"""Does work queued behind cuStreamWaitValue32 block the host thread that queues it (one process)?

Stream R spins ~0.5 s on the GPU, then writes flag=1; stream S waits for flag>=1, then gets <op>.
For each op it prints how long the host call took (well under 1 ms if it was only queued, ~0.5 s
if the host waited for the flag), for a flag in torch's memory and in a VMM block as the harness
lends them. Run it also with CUDA_MODULE_LOADING=EAGER to see whether lazy loading matters.

    python3 benchmarks/gpu_memop_probe.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    from cuda_agent.eval.handover import Block, wait_value, write_value

    torch.zeros(1, device="cuda")
    print("CUDA_MODULE_LOADING", os.environ.get("CUDA_MODULE_LOADING", "(default)"), flush=True)
    waiting, releasing = torch.cuda.Stream(), torch.cuda.Stream()
    a = torch.randn(1 << 20, device="cuda")
    b = torch.empty_like(a)
    m = torch.randn(512, 512, device="cuda")
    torch.mul(a, 1.0001, out=b)  # every kernel the ops launch, launched once before
    b.add_(0.5)
    torch.mm(m, m)
    b.copy_(a)
    torch.cuda._sleep(10)
    torch.cuda.synchronize()
    block = Block(4096, "cuda")
    ops = {
        "event": lambda: torch.cuda.Event().record(waiting),
        "mul": lambda: torch.mul(a, 1.0001, out=b),
        "add_": lambda: b.add_(0.5),
        "copy_": lambda: b.copy_(a),
        "mm": lambda: torch.mm(m, m),
        "write_value": None,
        "64 muls": lambda: [torch.mul(a, 1.0001, out=b) for _ in range(64)],
        "2000 muls": lambda: [torch.mul(a, 1.0001, out=b) for _ in range(2000)],
    }
    cycles = int(1.7e9 * 0.5)  # ~0.5 s at an H100's clock
    for where in ("torch", "vmm"):
        for name, op in ops.items():
            if where == "vmm":
                block.tensor[:4].zero_()
                addr = block.base
            else:
                flag = torch.zeros(1, dtype=torch.int32, device="cuda")
                addr = flag.data_ptr()
            torch.cuda.synchronize()
            with torch.cuda.stream(releasing):
                torch.cuda._sleep(cycles)
            write_value(releasing.cuda_stream, addr, 1)
            wait_value(waiting.cuda_stream, addr, 1)
            t0 = time.perf_counter()
            with torch.cuda.stream(waiting):
                if op is None:
                    write_value(waiting.cuda_stream, addr + 4, 7)
                else:
                    op()
            queued = (time.perf_counter() - t0) * 1e3
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            rest = (time.perf_counter() - t1) * 1e3
            print(f"{where:5} {name:12} host call {queued:9.3f} ms, then synchronize {rest:8.1f} ms", flush=True)
    block.close()


if __name__ == "__main__":
    main()
