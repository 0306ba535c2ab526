"""Eager and torch.compile baselines: timed like candidates, in their own worker, cached.

The cache key is (task hash, device name, torch version, dtypes, mode): the same task on the
same GPU type is timed once, not once per candidate. Only the parent writes the cache file
(workers run under a write sandbox), atomically, so concurrent evaluators never read half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from cuda_agent.eval.verdict import Timing


def default_cache_dir() -> Path:
    return Path(os.environ.get("CUDA_AGENT_CACHE", Path.home() / ".cache" / "cuda-agent"))


class BaselineCache:
    def __init__(self, path: Path):
        self.path = path

    @staticmethod
    def key(task_hash: str, device_name: str, torch_version: str, dtypes: list[str], mode: str) -> str:
        return "|".join([task_hash, device_name, torch_version, ",".join(dtypes), mode])

    def _load(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def get(self, key: str) -> dict | None:
        return self._load().get(key)

    def put(self, key: str, entry: dict) -> None:
        data = self._load()
        data[key] = entry
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".baselines-")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


def timing_from(entry: dict | None) -> Timing | None:
    return Timing(**entry["timing"]) if entry and entry.get("timing") else None
