"""Static guards over a candidate folder: model_new.py through `ast`, kernels/ through tree-sitter.

Static checks run before anything is built or imported, so a hack named here never
gets to run; the dynamic guards in the recorder and the judge catch what only shows at run time. After the build,
check_build_inputs runs the same rules over every other file nvcc read (its dependency lists).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from cuda_agent.eval.guards.static_cu import Qualifiers, check_cuda_source, defined_macros, qualifier_macros
from cuda_agent.eval.guards.static_py import check_model_new, dedupe
from cuda_agent.eval.guards.static_py_rules import DEFAULT_ALLOWED_IMPORTS
from cuda_agent.eval.verdict import Finding
from cuda_agent.filenames import candidate_symlinks
from cuda_agent.untrusted_files import SOURCE_CAP, read_bytes, read_text

SOURCE_EXTS = frozenset({".cu", ".cuh", ".h", ".hpp", ".hh", ".cpp", ".cc", ".cxx", ".inl"})
# Prebuilt code would run unseen: the harness builds kernels only from source.
BINARY_EXTS = frozenset({".so", ".o", ".a", ".obj", ".dll", ".dylib", ".cubin", ".fatbin", ".ptx"})


def check_candidate_static(
    candidate_dir: Path,
    *,
    task_fp32: bool,
    allow_precision: bool = False,
    allowed_imports: Iterable[str] = DEFAULT_ALLOWED_IMPORTS,
) -> list[Finding]:
    """Every static finding for a candidate: model_new.py first, then kernels/ in path order."""
    candidate_dir = Path(candidate_dir)
    model_new = candidate_dir / "model_new.py"
    if not model_new.is_file():
        raise FileNotFoundError(f"{model_new} not found: a candidate is model_new.py plus kernels/*.cu")
    links = candidate_symlinks(candidate_dir)  # nothing is read through them
    findings = [
        Finding(
            guard="forbidden_call",
            where=name,
            message=(f"{name} is a symlink; a candidate holds model_new.py and kernels/ themselves"),
        )
        for name in links
    ]
    if "model_new.py" not in links:
        try:
            source = read_text(model_new, root=candidate_dir, limit=SOURCE_CAP, shown="model_new.py")
        except OSError as e:  # UnreadableFile: a FIFO, a file swapped for a link, one over the cap
            findings.append(Finding(guard="forbidden_call", where="model_new.py", message=str(e)))
        else:
            findings += check_model_new(
                source, task_fp32=task_fp32, allow_precision=allow_precision, allowed_imports=allowed_imports
            )
    sources: dict[str, bytes] = {}
    for rel, data in _kernel_sources(candidate_dir, links):
        if isinstance(data, Finding):
            findings.append(data)
        else:
            sources[rel] = data
    qualifiers = _qualifiers(sources.values())  # a macro defined in a header marks functions of every file
    for rel, data in sources.items():
        findings += _check_source(
            data, rel, task_fp32=task_fp32, allow_precision=allow_precision, qualifiers=qualifiers
        )
    return dedupe(findings)


def _kernel_sources(candidate_dir: Path, links: Iterable[str]):
    """(shown name, bytes) of each source under kernels/ in path order, or (name, Finding) where one is
    prebuilt or unreadable; nothing through a symlink (reported by the caller)."""
    kernels = candidate_dir / "kernels"
    for path in sorted(kernels.rglob("*")) if kernels.is_dir() and "kernels" not in links else []:
        rel = path.relative_to(candidate_dir).as_posix()
        if any(p.is_symlink() for p in (path, *path.parents) if kernels in p.parents):
            continue  # reported above (as its shown name, which may differ from rel)
        if path.suffix in BINARY_EXTS:
            yield (
                rel,
                Finding(
                    guard="forbidden_call",
                    where=rel,
                    message=(f"{rel} is prebuilt code; ship sources, the harness compiles them"),
                ),
            )
        elif path.suffix in SOURCE_EXTS and not path.is_dir():
            try:
                yield rel, read_bytes(path, root=candidate_dir, limit=SOURCE_CAP, shown=rel)
            except OSError as e:  # UnreadableFile: not a regular file, or over the cap
                yield rel, Finding(guard="forbidden_call", where=rel, message=str(e))


def _qualifiers(sources: Iterable[bytes]) -> Qualifiers:
    return qualifier_macros(data.decode(errors="replace") for data in sources)


def check_build_inputs(
    candidate_dir: Path, inputs: dict[str, str], *, task_fp32: bool, allow_precision: bool = False
) -> list[Finding]:
    """The kernels/ rules over the files the build read that check_candidate_static did not scan:
    nvcc's dependency lists (BuildResult.inputs: name relative to the candidate dir or absolute ->
    sha256) name each file a compile read, however it was included; its suffix says nothing
    (`impl.inc`, none). A file whose bytes are no longer the ones the build read is a finding."""
    candidate_dir = Path(candidate_dir).resolve()
    kernels = candidate_dir / "kernels"
    findings: list[Finding] = []
    # the qualifier macros check_candidate_static read kernels/' sources with: a file it did not scan may not
    # define one of them another way (or #undef it), or a function taken for device code could be host code
    scanned = [d for _, d in _kernel_sources(candidate_dir, candidate_symlinks(candidate_dir)) if isinstance(d, bytes)]
    qualifiers = _qualifiers(scanned)
    for shown, sha in sorted(inputs.items()):
        path = candidate_dir / shown  # an absolute name stays itself (outside the candidate: not its writing)
        try:
            data = (
                path.read_bytes()
                if path.is_absolute() and not path.is_relative_to(candidate_dir)
                else read_bytes(path, root=candidate_dir, limit=SOURCE_CAP, shown=shown)
            )
        except OSError:
            data = b""
        if hashlib.sha256(data).hexdigest() != sha:
            findings.append(
                Finding(
                    guard="forbidden_call",
                    where=shown,
                    message=(
                        f"{shown} changed or went away after the build read it: leave kernels/ alone while it is judged"
                    ),
                )
            )
        elif not (path.suffix in SOURCE_EXTS and path.resolve().is_relative_to(kernels)):  # else scanned
            findings += _check_source(
                data, shown, task_fp32=task_fp32, allow_precision=allow_precision, qualifiers=qualifiers
            )
            if path.is_relative_to(candidate_dir):
                for name in sorted(defined_macros(data.decode(errors="replace")) & set(qualifiers)):
                    findings.append(
                        Finding(
                            guard="forbidden_call",
                            where=shown,
                            message=(
                                f"{shown} defines {name} again, which kernels/ uses as a function qualifier: "
                                "define a qualifier macro once, in a .cuh or .h under kernels/"
                            ),
                        )
                    )
    return dedupe(findings)


def _check_source(
    data: bytes, rel: str, *, task_fp32: bool, allow_precision: bool, qualifiers: Qualifiers | None = None
) -> list[Finding]:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:  # what is not text cannot be checked as text
        return [
            Finding(
                guard="forbidden_call",
                where=rel,
                message=(f"{rel} is not UTF-8 text (byte {e.start}): write kernel sources in UTF-8"),
            )
        ]
    return check_cuda_source(data, rel, task_fp32=task_fp32, allow_precision=allow_precision, qualifiers=qualifiers)
