"""The harness's own binding of a built kernel library: its copy of runtime.py, never the candidate's.

runtime.py (copied into workspaces as `kernel_runtime.py`) exposes only `load_kernels` to
model_new.py; its private entries `_load_spec` and `_bind_library` are what the harness calls
here. This module is imported as `cuda_agent.kernels.runtime`, a module object of its own:
nothing a candidate does to the `kernel_runtime` it imported reaches these launchers.

    library, spec = load_spec(build_dir)                 # reads and checks launchers.json
    launchers = bind_library(library, spec, cuda=True)   # {name: callable}, no files read
    raw = RawLibrary(build_dir, cuda=True)               # the judge's: ctypes functions, no checks
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path

from cuda_agent.kernels.runtime import _bind_library, _load_spec


def bind_library(library_path: Path, spec: dict, cuda: bool) -> dict[str, Callable[..., None]]:
    """{launcher name: callable} for the library at library_path as spec describes it: the callables
    model_new.py gets (same checks, same fast path); cuda=False binds in host-only mode."""
    return _bind_library(Path(library_path), spec, cuda)


def load_spec(build_dir: str | os.PathLike) -> tuple[Path, dict]:
    """(library path, spec) from build_dir/launchers.json (or that file), raising as load_kernels does:
    FileNotFoundError when the spec or its library is missing, RuntimeError on a version it does not read."""
    return _load_spec(build_dir)


def _ctype(param: dict):
    """ctypes' type for a launcher parameter: a pointer, or the scalar its C type names (int64_t -> c_int64)."""
    return ctypes.c_void_p if param["kind"] == "pointer" else getattr(ctypes, "c_" + param["type"].removesuffix("_t"))


class KernelNeedsGpu(RuntimeError):
    """A launcher launched a CUDA kernel in host-only mode (--device cpu), where no kernel runs: the
    candidate needs a GPU. The message says all of it in one line, so the judge's reply carries no
    traceback (channel.serve reads `one_line`): the judge's own frames would say nothing more, and
    CUDA's error string (without a GPU: "driver version is insufficient") would point at the driver."""

    one_line = True

    def __init__(self, launcher: str):
        super().__init__(
            f"{launcher} launched a CUDA kernel: this candidate needs a GPU (--device cpu runs launchers "
            "on the host, where no kernel runs); evaluate it on a GPU, or write launchers that loop on "
            "the host, as examples/scale_add_small/candidate_cpu does"
        )


class RawLibrary:
    """The launchers of one built library as raw ctypes functions (pointers as integers, no checks): the
    judge's, for plans the parent already checked against the launchers' signatures."""

    def __init__(self, build_dir: Path, cuda: bool):
        library, spec = load_spec(build_dir)  # the harness wrote it: the launchers parsed from the sources
        self.lib = ctypes.CDLL(str(library), mode=os.RTLD_LOCAL)
        self.fns: dict[str, tuple] = {}
        for launcher in spec["launchers"]:
            fn = getattr(self.lib, launcher["name"])
            fn.argtypes = [*map(_ctype, launcher["params"][:-1]), ctypes.c_void_p]  # the stream last
            fn.restype = None if launcher["returns"] == "void" else ctypes.c_int
            self.fns[launcher["name"]] = (fn, launcher["returns"] != "void")
        self.read_error = self.lib.cuda_agent_last_error
        self.read_error.argtypes, self.read_error.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_int
        self.error_buf = ctypes.create_string_buffer(512)
        # host-only mode: the launches a call made (support.cu counts them); on a GPU, not read
        self.launches = None if cuda else getattr(self.lib, "cuda_agent_launches", None)
        if self.launches is not None:
            self.launches.argtypes, self.launches.restype = [], ctypes.c_ulonglong
        self.cuda = cuda

    def check_error(self, name: str) -> None:
        """After each launcher call: on a GPU, CUDA's error state (no sync: launch errors, and earlier
        faults once they surface); in host-only mode, whether the call launched a kernel, which does
        nothing there (without a driver the error state is always set, so it alone cannot tell)."""
        if self.cuda:
            if self.read_error(self.error_buf, 512):
                raise RuntimeError(f"{name}: CUDA error at launch: {self.error_buf.value.decode(errors='replace')}")
        elif self.launches is not None and self.launches():
            raise KernelNeedsGpu(name)
