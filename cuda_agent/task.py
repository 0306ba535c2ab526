"""Load a task: `file.py::Class` (KernelBench format), its init args and seeded inputs. A task file
holds an nn.Module and, KernelBench style, module-level `get_inputs()` and `get_init_inputs()`; a
file without them takes them from a sidecar `<file>.inputs.py` (or the file `--inputs` names).
Torch is imported lazily so the CLI starts fast.
"""

from __future__ import annotations

import hashlib
import importlib.util
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

DEFAULT_CLASS = "Model"  # KernelBench's class name


class TaskError(ValueError):
    """A task that cannot be loaded; the message says what to do."""


def parse_task_ref(ref: str) -> tuple[Path, str | None]:
    """`path/to/file.py::ClassName` -> (path, class name or None for the default)."""
    path_s, _, cls = ref.partition("::")
    path = Path(path_s)
    if not path.is_file():
        raise TaskError(f"task file not found: {path} (give path/to/file.py or path/to/file.py::ClassName)")
    if path.suffix != ".py":
        raise TaskError(f"task must be a Python file, got {path}")
    return path, (cls or None)


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.stem + ".inputs.py")


def _exec_module(path: Path, name: str, source: bytes) -> ModuleType:
    """Run `source` (the bytes read from `path`, and hashed) as module `name`: exactly those bytes,
    never a cached .pyc nor a second read of the file."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TaskError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered so pickling classes and dataclasses inside the task work
    try:
        exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)
    except Exception as e:  # the task's own error, reported as such
        sys.modules.pop(name, None)
        raise TaskError(f"importing {path} failed: {type(e).__name__}: {e}") from e
    return module


@dataclass
class Task:
    """A loaded task: its module, the class to optimise and where its inputs come from."""

    path: Path
    class_name: str
    module: ModuleType
    inputs_path: Path | None  # sidecar that supplied get_inputs/get_init_inputs, if any
    source_hash: str
    get_inputs: Any = field(repr=False)
    get_init_inputs: Any = field(repr=False)

    @property
    def model_cls(self) -> type:
        return getattr(self.module, self.class_name)

    @property
    def name(self) -> str:
        # a file named model.py (examples/<name>/model.py, a workspace) is known by its folder
        stem = self.path.parent.name if self.path.stem == "model" else self.path.stem
        return stem if self.class_name == DEFAULT_CLASS else f"{stem}-{self.class_name}"

    def sources(self) -> dict[str, bytes]:
        """The files that define the task, to snapshot them outside any workspace."""
        return {p.name: p.read_bytes() for p in (self.path, self.inputs_path) if p is not None}

    def init_inputs(self, seed: int = 0) -> list:
        seed_everything(seed)
        return list(self.get_init_inputs())

    def build_model(self, init_inputs: list, device: str, seed: int = 0):
        """Construct the reference module exactly as the candidate will be: same seed, same args."""
        import torch

        seed_everything(seed)
        with torch.device(device):
            model = self.model_cls(*init_inputs)
        return model.to(device)

    def draw_inputs(self, seed: int, device: str) -> list:
        """One input set, a pure function of (seed, device): drawn on the device when factories allow."""
        import torch

        seed_everything(seed, device)
        with torch.device(device):
            inputs = list(self.get_inputs())
        return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def seed_everything(seed: int, device: str | None = None) -> None:
    """Seed Python's, numpy's and torch's generators: all of torch's, or (`device`) the CPU's and
    that device's only, which draw the same values under `torch.device(device)` at a small share of
    the cost (torch.manual_seed visits every backend: ~0.14 ms, paid for every timed call's inputs)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    if device is None or not (device == "cpu" or device.startswith("cuda")):
        torch.manual_seed(seed)
        return
    torch.default_generator.manual_seed(seed)
    if device.startswith("cuda"):
        index = torch.device(device).index
        gens = torch.cuda.default_generators  # empty until CUDA is initialized
        if gens:
            gens[torch.cuda.current_device() if index is None else index].manual_seed(seed)
        else:
            torch.cuda.manual_seed_all(seed)  # queued for CUDA's initialization


def task_label(path: str | Path, class_name: str = DEFAULT_CLASS) -> str:
    """The task as its user knows it, for the model's task message: the file's folder and stem
    (`level2/37_Matmul_Swish`), or a `model.py`'s two folders (`examples/scale_add_small`), with
    `::Class` when the class is not Model. Never the harness's private copy (a temp folder)."""
    p = Path(path)
    parts = [x for x in p.parent.parts if x not in (p.anchor, ".")] + ([] if p.stem == "model" else [p.stem])
    label = "/".join(parts[-2:]) or p.stem
    return label if class_name == DEFAULT_CLASS else f"{label}::{class_name}"


def source_digest(class_name: str, source: bytes, sidecar: bytes | None = None) -> str:
    """A task's content hash (Task.source_hash): the class name, the file, and the sidecar when
    it supplied get_inputs/get_init_inputs."""
    return hashlib.sha256(class_name.encode() + source + (sidecar or b"")).hexdigest()[:16]


def load_task(
    ref: str, inputs: Path | None = None, module_name: str = "cuda_agent_task", expected_hash: str | None = None
) -> Task:
    """Load `file.py[::Class]`; inputs from the file, else `inputs`, else the `<file>.inputs.py` sidecar.
    Each file is read once: the bytes that run are the bytes hashed. With `expected_hash` (a copy
    the harness made and must not trust blindly) files that cannot give that hash are refused
    before any of their code runs, and the loaded task must have exactly that hash."""
    path, cls = parse_task_ref(ref)
    class_name = cls or DEFAULT_CLASS
    source = _read(path)
    inputs_path = inputs if inputs is not None else sidecar_path(path)
    side_source = _read(inputs_path) if inputs_path.is_file() else None
    if expected_hash is not None:
        # the sidecar counts only when it supplied the inputs: either hash may be the task's
        if expected_hash not in {source_digest(class_name, source), source_digest(class_name, source, side_source)}:
            raise TaskError(
                f"{path} is not the task the harness copied (expected hash {expected_hash}); nothing was run from it"
            )
    module = _exec_module(path.resolve(), module_name, source)
    if not isinstance(getattr(module, class_name, None), type):
        import torch

        classes = sorted(
            n
            for n, v in vars(module).items()
            if isinstance(v, type) and issubclass(v, torch.nn.Module) and v.__module__.startswith("cuda_agent_task")
        )
        hint = f" (it defines: {', '.join(classes)}; pick one with {path}::{classes[0]})" if classes else ""
        raise TaskError(f"{path} has no class {class_name}{hint}")
    fns: dict[str, Any] = {n: getattr(module, n, None) for n in ("get_inputs", "get_init_inputs")}
    used_sidecar = None
    if any(f is None for f in fns.values()) and side_source is not None:
        side = _exec_module(inputs_path.resolve(), module_name + "_inputs", side_source)
        for n in fns:
            fns[n] = fns[n] or getattr(side, n, None)
        used_sidecar = inputs_path
    elif inputs is not None and side_source is None:
        raise TaskError(f"inputs file not found: {inputs}")
    if missing := [n for n, f in fns.items() if f is None]:
        raise TaskError(
            f"{path} defines no {' or '.join(missing)}(): add them to the file, or write them in "
            f"{sidecar_path(path)} (or pass --inputs FILE), e.g. "
            "`def get_inputs(): return [torch.randn(64, 128)]` and `def get_init_inputs(): return []`"
        )
    source_hash = source_digest(class_name, source, side_source if used_sidecar is not None else None)
    if expected_hash is not None and source_hash != expected_hash:
        raise TaskError(f"{path} is not the task the harness copied (hash {source_hash}, expected {expected_hash})")
    return Task(
        path=path.resolve(),
        class_name=class_name,
        module=module,
        source_hash=source_hash,
        inputs_path=used_sidecar.resolve() if used_sidecar else None,
        **fns,
    )


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise TaskError(f"cannot read {path}: {e.strerror}") from None


def describe_value(x: Any) -> dict:
    """Shape/dtype of a tensor input, or the Python value of anything else (for records)."""
    import torch

    if isinstance(x, torch.Tensor):
        return {"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}
    return {"value": repr(x)[:80]}
