"""llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`), with `--no-extra-bufts`:
the model's weights stay in plain CPU buffers instead of llama.cpp's repacked ones (AMX, AVX-512 tiles).
On the 2-core sandbox machine of 2026-12-01 the CPU reports AMX but a batched decode there dies with
SIGILL (Illegal instruction) in ggml's AMX path; plain buffers work. Every other argument is the
server's own, e.g.

    python benchmarks/llama_server.py --no-extra-bufts --model SmolLM2-135M-Instruct.Q4_1.gguf \\
        --n_ctx 8192 --port 8765

Used by tests/agent/test_smollm2_server.py and benchmarks/results/2026-12-01-smollm2-8k.md.
"""

from __future__ import annotations

import sys


def main() -> None:
    if "--no-extra-bufts" in sys.argv:
        sys.argv.remove("--no-extra-bufts")
        import llama_cpp.llama_cpp as lib

        default = lib.llama_model_default_params

        def plain_buffers():
            params = default()
            params.use_extra_bufts = False
            return params

        lib.llama_model_default_params = plain_buffers  # what llama_cpp.Llama() asks for its model params
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
