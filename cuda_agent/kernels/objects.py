"""One .cu -> one object file in the content-hash cache.

Which files a compile reads is known only after it: nvcc's dependency list (depfile.py) names
every one, however it was included (a macro, a header with no suffix, a folder of -I). So the
cache works like ccache's manifests: the job's key (the source bytes, the flags, the arch and
the nvcc version) names a manifest, whose entries record what an earlier compile read, with the
sha256 of each file outside the toolkit and system folders, and the object it made. A lookup
hits only an entry whose every file still hashes the same; the object's own key covers them
all. Entries are written atomically (temp file + os.replace, object first), so concurrent
builds never see half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.kernels.depfile import DepfileError, local_inputs, parse_depfile, unchanged
from cuda_agent.kernels.toolkit import ToolkitError, system_include_dirs
from cuda_agent.untrusted_files import SOURCE_CAP, UnreadableFile, read_bytes, read_text

COMPILE_TIMEOUT_S = 600
MANIFEST_ENTRIES = 8  # per job key: a few versions of its headers, to switch back and forth
_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
# Libraries linked only when a source (or a header it includes) uses them.
_LIBS_BY_HEADER = {"cublas_v2.h": "-lcublas", "cublas.h": "-lcublas", "cublasLt.h": "-lcublasLt"}


@dataclass
class CompileJob:
    """A source, the cache entry it maps to, and (after compile or lookup) what nvcc said and read."""

    source: Path
    shown: str  # as messages cite it: relative to the candidate dir
    cwd: Path  # nvcc runs here, so its messages name files relative to it
    key: str  # the manifest's: source, flags, arch, nvcc
    argv: list[str]  # the nvcc command, without "-o <object>"
    libs: set[str] = field(default_factory=set)
    ptxas: bool = False  # wants a ptxas -v report (it is cached along with the object)
    output: str = ""
    ok: bool = True
    object_key: str | None = None  # the object's: key plus what the compile read; set by lookup or compile
    # each file it read outside the toolkit and system folders (relative to cwd, as nvcc named it) -> sha256
    reads: dict[str, str] = field(default_factory=dict)

    def obj(self, cache: Path) -> Path:
        return cache / "obj" / f"{self.object_key or self.key}.o"

    def manifest(self, cache: Path) -> Path:
        return cache / "obj" / f"{self.key}.json"

    def command(self, cache: Path) -> str:
        """The command line, as a person would rerun it."""
        return f"cd {shlex.quote(str(self.cwd))} && {shlex.join([*self.argv, '-o', str(self.obj(cache))])}"


def make_job(
    source: Path, cwd: Path, shown: str, nvcc: Path, flags: list[str], identity: dict, *, lineinfo: bool, ptxas: bool
) -> CompileJob:
    """identity: what else the object depends on (arch, nvcc version). The source is read as
    untrusted_files says (UnreadableFile: a FIFO, a link, one over the cap)."""
    _, libs = local_headers(source, cwd)
    parts = {
        "source": _sha(read_bytes(source, root=cwd, limit=SOURCE_CAP, shown=shown)),
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
    """Headers on disk that `source` includes by a literal name (recursively), and the vendor
    libraries it needs. A guess from the text: what a compile really read is CompileJob.reads.
    Only files below kernel_dir are read (untrusted_files): the jailed nvcc sees no others."""
    seen: dict[Path, None] = {}
    libs: set[str] = set()
    pending, root = [source], Path(kernel_dir).resolve()
    while pending:
        current = pending.pop()
        try:
            text = read_bytes(current.resolve(), root=root, limit=SOURCE_CAP)
        except (UnreadableFile, ValueError):  # not one to read, or not below kernel_dir: no includes to follow
            continue
        for quote, name in _INCLUDE.findall(text):
            header = name.decode(errors="replace").strip()
            libs |= _libs_for(header)
            for d in [current.parent, kernel_dir] if quote == b'"' else [kernel_dir]:
                path = (d / header).resolve()
                if path.is_file():
                    if path not in seen and path != source:
                        seen[path] = None
                        pending.append(path)
                    break
    return list(seen), libs


def _libs_for(header: str) -> set[str]:
    base = header.rsplit("/", 1)[-1]
    if base in _LIBS_BY_HEADER:
        return {_LIBS_BY_HEADER[base]}
    return {"-lcudnn"} if base.startswith("cudnn") and base.endswith(".h") else set()


def load_cached(job: CompileJob, cache: Path) -> bool:
    """Whether an object of job's is cached for the files as they are now (with a ptxas report,
    when one is wanted); fills job.output, job.reads and job.object_key."""
    for entry in _entries(job.manifest(cache)):
        try:
            found = (cache / "obj" / f"{entry['object']}.o").is_file()
            wanted = not job.ptxas or entry["ptxas_verbose"]
            if found and wanted and unchanged(entry["reads"], job.cwd):
                job.object_key, job.reads, job.output = entry["object"], dict(entry["reads"]), entry["output"]
                job.libs |= set(entry["libs"])
                return True
        except (KeyError, TypeError, AttributeError):
            continue  # an entry of another format: as good as a miss
    return False


def compile_job(job: CompileJob, cache: Path) -> None:
    """Run nvcc (in the jail: nvcc_run.py), which also writes the list of files it read; on success
    the object lands in the cache under a key that covers those files, then the manifest entry."""
    from cuda_agent.kernels.nvcc_run import run_nvcc

    pending = cache / "obj" / f".pending-{job.key}-{uuid.uuid4().hex}"
    obj, depfile = pending.with_suffix(".o"), pending.with_suffix(".d")
    started = time.time_ns()
    try:
        job.output, job.ok = run_nvcc(
            job.argv, target=obj, cwd=job.cwd, timeout=COMPILE_TIMEOUT_S, what=f"compiling {job.shown}", depfile=depfile
        )
        if not job.ok:
            return
        try:
            # nvcc wrote it in the jail: read as untrusted_files says (1000s of names fit in the cap)
            names = parse_depfile(read_text(depfile, root=depfile.parent, limit=64 << 20, errors="surrogateescape"))
            reads = local_inputs(names, job.cwd, system_include_dirs(Path(job.argv[0])))
        except (OSError, DepfileError, ToolkitError) as exc:
            job.output, job.ok = f"nvcc error : {job.shown}: {exc}", False
            return
        job.reads = reads
        job.libs |= set().union(*(_libs_for(n) for n in names))
        job.object_key = _sha(json.dumps([job.key, sorted(job.reads.items())]).encode())[:32]
        os.replace(obj, job.obj(cache))
    finally:
        obj.unlink(missing_ok=True)
        depfile.unlink(missing_ok=True)
    if _changed_since(job.reads, job.cwd, started):
        return  # edited while nvcc read it: which version the object holds is unknown, so it is not recorded
    entry = {
        "object": job.object_key,
        "reads": job.reads,
        "output": job.output,
        "ptxas_verbose": job.ptxas,
        "libs": sorted(job.libs),
        "source": job.shown,
    }
    others = [e for e in _entries(job.manifest(cache)) if e.get("object") != job.object_key]
    write_atomic(job.manifest(cache), json.dumps({"entries": [entry, *others][:MANIFEST_ENTRIES]}))


def _entries(manifest: Path) -> list[dict]:
    try:
        entries = json.loads(manifest.read_text()).get("entries", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _changed_since(reads: dict[str, str], cwd: Path, started_ns: int) -> bool:
    for name in reads:
        try:
            st = os.stat(cwd / name)
        except OSError:
            return True
        if max(st.st_mtime_ns, st.st_ctime_ns) >= started_ns:
            return True
    return False


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
