"""The policy a trainer starts from (`train sft`, `train grpo`): read from disk only (a model folder, a
hub id already in the local cache, a GGUF file in a folder), or the tiny model built here
(`--model tiny`, tiny_model.py); and the precision it trains in."""

from __future__ import annotations

from pathlib import Path


class ModelLoadError(ValueError):
    pass


def load_model(model: str, gguf_file: str | None = None, *, dtype=None, seed: int = 0):
    """(model, tokenizer) from disk only: a folder, a cached hub id, or a GGUF file in that folder;
    `tiny` builds the tiny model (tiny_model.py: random weights from `seed`). GGUF weights are
    dequantised (to float32 unless dtype says otherwise) so they can be trained."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cuda_agent.train.tiny_model import TINY, TinyModelError, build_tiny, gguf_special_tokens

    if model == TINY and not gguf_file:
        try:
            return build_tiny(seed)
        except TinyModelError as e:
            raise ModelLoadError(str(e)) from None
    if model.startswith(("/", ".")) and not Path(model).exists():
        raise ModelLoadError(f"cannot load {model}: no such folder")  # rather than "not a valid repo id"
    kw = {"local_files_only": True, **({"gguf_file": gguf_file} if gguf_file else {})}
    try:
        tokenizer = AutoTokenizer.from_pretrained(model, **kw)
        lm = AutoModelForCausalLM.from_pretrained(model, dtype=dtype or torch.float32, **kw)
    except (OSError, ValueError, ImportError) as e:  # not on disk, not a model folder, no such GGUF file, no gguf
        what = model + (f" (GGUF {gguf_file})" if gguf_file else "")
        raise ModelLoadError(f"cannot load {what} from disk: {str(e).splitlines()[0]}") from None
    if gguf_file:
        gguf_special_tokens(lm.config, tokenizer)
    return lm, tokenizer


def precision() -> str:
    """bf16 mixed precision where the GPU has it; float32 elsewhere (CPU, older GPUs)."""
    import torch

    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "fp32-cpu"
