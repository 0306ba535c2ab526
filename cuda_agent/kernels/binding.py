"""The harness's own binding of a built kernel library: its copy of runtime.py, never the candidate's.

runtime.py (copied into workspaces as `kernel_runtime.py`) exposes only `load_kernels` to
model_new.py; its private entry `_bind_library` is what the harness calls here. This module is
imported as `cuda_agent.kernels.runtime`, a module object of its own: nothing a candidate does to
the `kernel_runtime` it imported reaches these launchers.

    library, spec = load_spec(build_dir)                 # reads and checks launchers.json
    launchers = bind_library(library, spec, cuda=True)   # {name: callable}, no files read
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from cuda_agent.kernels.launchers import SPEC_NAME, SPEC_VERSION
from cuda_agent.kernels.runtime import _bind_library


def bind_library(library_path: Path, spec: dict, cuda: bool) -> dict[str, Callable[..., None]]:
    """{launcher name: callable} for the library at library_path as spec describes it.

    The callables are the ones model_new.py gets (same argument checks, same fast path, the
    current stream passed last); cuda=False binds in host-only mode (CPU tensors, NULL stream).
    """
    return _bind_library(Path(library_path), spec, cuda)


def load_spec(build_dir: str | os.PathLike) -> tuple[Path, dict]:
    """(library path, spec) from build_dir/launchers.json (build_dir may also be that file).

    Raises as load_kernels does: FileNotFoundError when the spec or its library is missing,
    RuntimeError on a spec version this runtime does not read.
    """
    path = Path(build_dir)
    spec_path = path if path.is_file() else path / SPEC_NAME
    if not spec_path.is_file():
        raise FileNotFoundError(f"no {SPEC_NAME} in {path}: compile the kernels first (kernels/*.cu -> build)")
    spec = json.loads(spec_path.read_text())
    if spec.get("version") != SPEC_VERSION:
        raise RuntimeError(
            f"{spec_path} has version {spec.get('version')}, this runtime reads {SPEC_VERSION}: compile again"
        )
    library = spec_path.parent / spec["library"]
    if not library.is_file():
        raise FileNotFoundError(f"{library} is missing (named by {spec_path}): compile the kernels again")
    return library, spec
