"""nvcc in the jail (cuda_agent/kernels/nvcc_run.py), attacked: a candidate's source names a file
outside kernels/ through a path a macro computes (no static guard sees it) or an assembler
.incbin, and what nvcc read would come back in the compile errors the model reads. Each attack is
first shown to work on plain nvcc, then to get nothing through the build."""

from __future__ import annotations

import os
import subprocess

import pytest

from cuda_agent.jail import jail_problem
from cuda_agent.kernels.build import build_kernels
from cuda_agent.kernels.toolkit import find_nvcc

pytestmark = pytest.mark.skipif(jail_problem() is not None, reason=str(jail_problem()))

SECRET = "sk-cuda-agent-test-4f9e1c"
LAUNCHER = 'extern "C" void run(cudaStream_t stream) {}\n'


def leaks(candidate, cache_dir, source: str) -> tuple[str, str]:
    """(plain nvcc's output, the build's errors) for kernels/a.cu = `source`."""
    path = candidate.write("a.cu", source + LAUNCHER)
    plain = subprocess.run(
        [str(find_nvcc()), "-c", path.name, "-o", os.devnull],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    built = build_kernels(candidate.kernels, cache_dir)
    return plain.stdout + plain.stderr, built.errors


def test_a_computed_include_of_a_file_outside_reads_nothing(candidate, cache_dir, tmp_path):
    secret = tmp_path / "keys.env"  # beside the candidate, as a home folder's files are
    secret.write_text(f"OPENAI_API_KEY={SECRET}\n")
    plain, errors = leaks(candidate, cache_dir, f'#define WHERE "{secret}"\n#include WHERE\n')
    assert SECRET in plain  # the attack, unjailed
    assert SECRET not in errors and "No such file" in errors


def test_an_incbin_of_a_file_outside_fails(candidate, cache_dir, tmp_path):
    """The bytes would land in the object (and a listing tool could show them): the jail's nvcc
    cannot open the file at all."""
    secret = tmp_path / "keys.env"
    secret.write_text(f"OPENAI_API_KEY={SECRET}\n")
    source = f'__asm__(".section .rodata\\n.incbin \\"{secret}\\"\\n.text");\n'
    plain, errors = leaks(candidate, cache_dir, source)
    assert "error" not in plain.lower()  # unjailed, the file's bytes went into the object
    assert str(secret) in errors  # the jail's assembler could not open it
