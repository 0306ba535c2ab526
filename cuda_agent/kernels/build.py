"""kernels/*.cu -> one shared library per version, through a content-hash cache (docs/kernels.md).

Each .cu is compiled on its own by plain nvcc (no torch headers: about a second, not a minute)
into the object cache (objects.py), keyed by every file the compile read. An unchanged rebuild
runs no nvcc at all; an edit recompiles the files that read the edited one only. The objects link
into `libkernels-<hash>.so`, named by the object keys, next to the `launchers.json` that
runtime.py binds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel

from cuda_agent.filenames import bad_sources, build_output, candidate_symlinks
from cuda_agent.filenames import shown as shown_name
from cuda_agent.kernels.errors import format_diagnostics, parse_diagnostics
from cuda_agent.kernels.launchers import SPEC_NAME, LauncherSpec, parse_sources, write_spec
from cuda_agent.kernels.objects import COMPILE_TIMEOUT_S, CompileJob, compile_job, load_cached, make_job
from cuda_agent.kernels.ptxas import PtxasInfo, parse_ptxas_report
from cuda_agent.kernels.source_tree import tree_names, tree_problems
from cuda_agent.kernels.toolkit import ToolkitError, detect_arch, find_nvcc, gencode_flags, nvcc_version
from cuda_agent.untrusted_files import UnreadableFile

SUPPORT_SOURCE = Path(__file__).with_name("support.cu")
# every kernel launch passes through support.cu's counter first (host-only mode asks whether a
# launcher launched anything); a counter increment per launch, nothing else
LAUNCH_WRAPS = [
    flag
    for entry in ("__cudaPushCallConfiguration", "cudaLaunchKernel", "cudaLaunchCooperativeKernel")
    for flag in ("-Xlinker", f"--wrap={entry}")
]
_LINK_FLAG = re.compile(r"^-(L.+|l(?!ineinfo$)[\w+.-]+)$")  # -lfoo / -L/dir go to the link, not nvcc -c


class BuildResult(BaseModel):
    ok: bool
    lib_path: Path | None = None
    spec_path: Path | None = None
    out_dir: Path | None = None
    seconds: float = 0.0
    cached: bool = False  # nothing was recompiled
    compiled: list[str] = []  # sources recompiled this time, relative to the candidate dir
    errors: str = ""
    warnings: str = ""
    ptxas: dict[str, PtxasInfo] = {}  # kernel -> resources; filled when ptxas_verbose
    commands: list[str] = []  # every nvcc command of this library, cached or not
    # Every file the candidate's compiles read outside the toolkit and system folders (nvcc's
    # dependency lists; the sources among them), relative to the candidate dir (absolute if
    # outside it) -> sha256; and, per source, which of them its compile read (itself first).
    inputs: dict[str, str] = {}
    reads: dict[str, list[str]] = {}
    launchers: list[str] = []
    kernels: list[str] = []


def build_kernels(
    kernel_dir: Path,
    cache_dir: Path,
    *,
    arch: str | None = None,
    extra_flags: Sequence[str] = (),
    lineinfo: bool = False,
    ptxas_verbose: bool = False,
    out_dir: Path | None = None,
) -> BuildResult:
    """Compile kernel_dir/*.cu into one library; a bad candidate or toolkit gives ok=False, not a raise.

    Messages cite files relative to the candidate dir (kernel_dir's parent): `kernels/relu.cu:12`.
    """
    start = time.perf_counter()

    def failed(errors: str, **extra) -> BuildResult:
        return BuildResult(ok=False, errors=errors, seconds=time.perf_counter() - start, **extra)

    links = [name for name in candidate_symlinks(Path(kernel_dir).parent) if name != "model_new.py"]
    if links:  # the jailed nvcc would see a linked folder's target, and the parent reads the sources
        return failed("\n".join(f"{name} is a symlink: kernels/ must hold the sources themselves" for name in links))
    kernel_dir, cache_dir = Path(kernel_dir).resolve(), Path(cache_dir).resolve()
    root = kernel_dir.parent
    if kernel_dir.is_dir() and (odd := tree_problems(kernel_dir, root)):  # a FIFO any #include could name
        return failed("\n".join(odd))

    sources = sorted(kernel_dir.glob("*.cu")) if kernel_dir.is_dir() else []
    if not sources:
        return failed(f'no .cu files in {kernel_dir}: write kernels/<name>.cu with extern "C" launchers')
    if bad := bad_sources(sources, root):  # a ',' broke fatbinary; no nvcc or cache for such names
        return failed("\n".join(bad))
    try:
        nvcc = find_nvcc()
        identity = {"nvcc": nvcc_version(nvcc), "arch": arch or detect_arch()}
        # CCCL_DISABLE_NVTX: CUB's device-wide algorithms otherwise carry NVTX's injection loader
        # (getenv + dlopen of a profiler library), which the native audit rejects (docs/guards.md).
        base = [
            "-O3",
            "-std=c++17",
            *gencode_flags(identity["arch"]),
            "-Xcompiler",
            "-fPIC",
            "-I.",
            "-DCCCL_DISABLE_NVTX",
        ]
    except ToolkitError as exc:
        return failed(str(exc))
    flags = [*base, *(["-lineinfo"] if lineinfo else []), *(f for f in extra_flags if not _LINK_FLAG.match(f))]
    link_flags = [f for f in extra_flags if _LINK_FLAG.match(f)]
    # an object serves one listing of kernels/ only: a new file can change a compile that read none of it
    # NUL-joined: a name may hold a newline ("b\nimpl.h" joined as "b" and "impl.h" would), never a NUL
    names = hashlib.sha256("\0".join(tree_names(kernel_dir)).encode(errors="surrogateescape")).hexdigest()
    try:  # the sources are read as untrusted_files says: a FIFO named kernels/a.cu must not hang the build
        jobs = [
            make_job(src, kernel_dir, str(src.relative_to(root)), nvcc, flags, identity | {"kernels": names},
                     lineinfo=lineinfo, ptxas=ptxas_verbose)
            for src in sources
        ]  # fmt: skip
        found = parse_sources(sources, root)
    except UnreadableFile as e:
        return failed(
            f"{e}; kernels/ must hold regular source files: delete it with delete_file and write it with edit_file"
        )
    # The support source has no kernels: the candidate's flags are not its business.
    shown = "cuda_agent/kernels/support.cu"
    jobs.append(make_job(SUPPORT_SOURCE, SUPPORT_SOURCE.parent, shown, nvcc, base, identity,
                         lineinfo=False, ptxas=False))  # fmt: skip
    misses = [j for j in jobs if not load_cached(j, cache_dir)]
    if misses:
        with ThreadPoolExecutor(max_workers=min(len(misses), os.cpu_count() or 1)) as pool:
            list(pool.map(lambda j: compile_job(j, cache_dir), misses))

    errors, warnings = _diagnostics(jobs, root)
    errors = "\n".join(filter(None, [errors, *found.problems]))
    warnings = "\n".join(filter(None, [warnings, *found.warnings]))
    ptxas: dict[str, PtxasInfo] = {}
    for j in jobs:
        if j.ptxas:
            ptxas.update(parse_ptxas_report(j.output, j.shown))
    inputs, reads = _inputs(jobs[:-1], root)  # the last job is support.cu: the project's, not the candidate's
    errors = "\n".join(filter(None, [errors, *_unversioned(inputs, reads)]))
    common = dict(
        inputs=inputs,
        reads=reads,
        compiled=[j.shown for j in misses],
        cached=not misses,
        warnings=warnings,
        ptxas=ptxas,
        commands=[j.command(cache_dir) for j in jobs],
        launchers=[launcher.name for launcher in found.launchers],
        kernels=found.kernels,
    )
    if errors:
        return failed(errors, **common)

    libs = sorted(set().union(*(j.libs for j in jobs)))
    lib, command, link_errors = _link(jobs, cache_dir, nvcc, identity["nvcc"], libs + link_flags, root)
    common["commands"].append(command)
    if link_errors:
        return failed(link_errors, **common)
    out = Path(out_dir).resolve() if out_dir is not None else lib.parent
    out.mkdir(parents=True, exist_ok=True)
    lib_path = _place(lib, out)
    spec_path = out / SPEC_NAME
    write_spec(LauncherSpec(library=lib_path.name, launchers=found.launchers, kernels=found.kernels), spec_path)
    return BuildResult(
        ok=True, lib_path=lib_path, spec_path=spec_path, out_dir=out,
        seconds=time.perf_counter() - start, **common,
    )  # fmt: skip


def _inputs(jobs: list[CompileJob], root: Path) -> tuple[dict[str, str], dict[str, list[str]]]:
    """BuildResult.inputs and .reads of the jobs that compiled or were found in the cache."""
    inputs: dict[str, str] = {}
    reads: dict[str, list[str]] = {}
    for j in jobs:
        names: list[str] = []
        for name, sha in j.reads.items():
            path = (j.cwd / name).resolve()
            shown = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
            inputs[shown] = sha
            names += [] if shown in names else [shown]
        if names:
            reads[j.shown] = sorted(names, key=lambda n: n != j.shown)  # stable: the source first
    return dict(sorted(inputs.items())), reads


def _unversioned(inputs: dict[str, str], reads: dict[str, list[str]]) -> list[str]:
    """One line per file of kernels/ a compile read under a build output's name (build/, *.o...):
    a version never holds one, so what was judged could not be committed, hashed or exported."""
    return [
        f"{shown_name(name)} is read by {next(s for s, r in reads.items() if name in r)} but a version never holds it "
        f"(build/, .cache/, __pycache__/, *.o, *.so, *.ptx... are build outputs): give it another name under kernels/"
        for name in inputs
        if name.startswith("kernels/") and build_output(name.removeprefix("kernels/"))
    ]


def _diagnostics(jobs: list[CompileJob], root: Path) -> tuple[str, str]:
    """(errors, warnings) of all compiles together, so a header's error is folded across includers."""
    diags, unparsed = [], []
    for j in jobs:
        found = parse_diagnostics(j.output, j.cwd, j.shown)
        if not j.ok and not any(d.severity == "error" for d in found):
            raw = j.output.strip()[-2000:] or "no output"
            unparsed.append(f"{j.shown}: nvcc failed, and its output was not understood:\n{raw}")
        diags += found
    errors, warnings = format_diagnostics(diags, root)
    return "\n".join(filter(None, [errors, *unparsed])), warnings


def _link(
    jobs: list[CompileJob], cache: Path, nvcc: Path, version: str, link_flags: list[str], root: Path
) -> tuple[Path, str, str]:
    """(library, command, errors): one library per set of objects, cached like them."""
    link_flags = [*link_flags, *LAUNCH_WRAPS]
    objects = [j.object_key for j in jobs]
    key = hashlib.sha256(json.dumps([version, objects, link_flags]).encode()).hexdigest()[:16]
    lib = cache / "lib" / key / f"libkernels-{key}.so"
    objs = [str(j.obj(cache)) for j in jobs]
    # --no-undefined: a missing symbol fails here, not at dlopen in the model's process.
    argv = [str(nvcc), "-shared", *objs, *link_flags, "-Xlinker", "--no-undefined"]
    command = shlex.join([*argv[:2], "-o", str(lib), *argv[2:]])
    if lib.is_file():
        return lib, command, ""
    from cuda_agent.kernels.nvcc_run import run_nvcc

    output, ok = run_nvcc(argv, target=lib, cwd=cache / "obj", timeout=COMPILE_TIMEOUT_S, what="linking", mode=0o755)
    if not ok:
        errors, _ = format_diagnostics(parse_diagnostics(output, lib.parent), root)
        return lib, command, errors or f"link failed:\n{output.strip()[-2000:]}"
    return lib, command, ""


def _place(lib: Path, out: Path) -> Path:
    """The library inside out: a hard link to the cached one where possible, else a copy."""
    target = out / lib.name
    if target == lib or target.is_file():
        return target
    tmp = out / f".tmp-{uuid.uuid4().hex}-{lib.name}"
    try:
        os.link(lib, tmp)
    except OSError:
        shutil.copy2(lib, tmp)
    os.replace(tmp, target)
    return target
