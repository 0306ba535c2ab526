"""One .cu -> one object file in the content-hash cache.

The key covers everything that can change the object: the source bytes, the bytes of every local
header it includes (recursively), the flags, the arch and the nvcc version. Entries are written
atomically (temp file + os.replace, metadata last), so concurrent builds never see half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

COMPILE_TIMEOUT_S = 600
_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
# Libraries linked only when a source (or a header it includes) uses them.
_LIBS_BY_HEADER = {"cublas_v2.h": "-lcublas", "cublas.h": "-lcublas", "cublasLt.h": "-lcublasLt"}


@dataclass
class CompileJob:
    """A source, the cache entry it maps to, and (after compile or lookup) what nvcc said."""

    source: Path
    shown: str  # as messages cite it: relative to the candidate dir
    cwd: Path  # nvcc runs here, so its messages name files relative to it
    key: str
    argv: list[str]  # the nvcc command, without "-o <object>"
    libs: set[str] = field(default_factory=set)
    ptxas: bool = False  # wants a ptxas -v report (it is cached along with the object)
    output: str = ""
    ok: bool = True

    def obj(self, cache: Path) -> Path:
        return cache / "obj" / f"{self.key}.o"

    def meta(self, cache: Path) -> Path:
        return cache / "obj" / f"{self.key}.json"

    def command(self, cache: Path) -> str:
        """The command line, as a person would rerun it."""
        return f"cd {shlex.quote(str(self.cwd))} && {shlex.join([*self.argv, '-o', str(self.obj(cache))])}"


def make_job(
    source: Path, cwd: Path, shown: str, nvcc: Path, flags: list[str], identity: dict, *, lineinfo: bool, ptxas: bool
) -> CompileJob:
    """identity: what else the object depends on (arch, nvcc version)."""
    headers, libs = local_headers(source, cwd)
    parts = {
        "source": _sha(source.read_bytes()),
        "headers": sorted(_sha(h.read_bytes()) for h in headers),
        "flags": flags,
        **identity,
        # -lineinfo embeds the source path, so that object is only valid where it was built.
        "path": str(source) if lineinfo else source.name,
    }
    key = _sha(json.dumps(parts, sort_keys=True).encode())[:32]
    name = str(source) if lineinfo else source.name
    argv = [str(nvcc), *flags, *(["-Xptxas", "-v"] if ptxas else []), "-c", name]
    return CompileJob(source=source, shown=shown, cwd=cwd, key=key, argv=argv, libs=libs, ptxas=ptxas)


def local_headers(source: Path, kernel_dir: Path) -> tuple[list[Path], set[str]]:
    """Headers on disk that `source` includes (recursively), and the vendor libraries it needs."""
    seen: dict[Path, None] = {}
    libs: set[str] = set()
    pending = [source]
    while pending:
        current = pending.pop()
        for quote, name in _INCLUDE.findall(current.read_bytes()):
            header = name.decode(errors="replace").strip()
            base = header.rsplit("/", 1)[-1]
            if base in _LIBS_BY_HEADER:
                libs.add(_LIBS_BY_HEADER[base])
            elif base.startswith("cudnn") and base.endswith(".h"):
                libs.add("-lcudnn")
            for d in [current.parent, kernel_dir] if quote == b'"' else [kernel_dir]:
                path = (d / header).resolve()
                if path.is_file():
                    if path not in seen and path != source:
                        seen[path] = None
                        pending.append(path)
                    break
    return list(seen), libs


def load_cached(job: CompileJob, cache: Path) -> bool:
    """Whether job's object is cached (with a ptxas report, when one is wanted); fills job.output."""
    try:
        meta = json.loads(job.meta(cache).read_text())
    except (OSError, ValueError):
        return False
    if not job.obj(cache).is_file() or (job.ptxas and not meta.get("ptxas_verbose")):
        return False
    job.output = meta.get("output", "")
    return True


def compile_job(job: CompileJob, cache: Path) -> None:
    """Run nvcc (in the jail: nvcc_run.py); on success the object and its metadata land in the cache."""
    from cuda_agent.kernels.nvcc_run import run_nvcc

    job.output, job.ok = run_nvcc(job.argv, target=job.obj(cache), cwd=job.cwd,
                                  timeout=COMPILE_TIMEOUT_S, what=f"compiling {job.shown}")
    if not job.ok:
        return
    # The metadata is written last: its presence is what marks the entry complete.
    meta = {"source": job.shown, "output": job.output, "ptxas_verbose": job.ptxas}
    write_atomic(job.meta(cache), json.dumps(meta))


def write_atomic(path: Path, data: str | bytes, *, prefix: str = ".tmp-", sync: bool = False) -> None:
    """Write through a temp file beside `path` (mkstemp: mode 0600) and rename: a reader sees the
    old file or the new one, never half of one. `sync`: on disk before the rename (survives a crash)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
