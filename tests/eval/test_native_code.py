"""The host-instruction audit (eval/guards/native_code.py) reads what the object holds, however the
source spelled it: an intrinsic with no asm, and the prefixed forms objdump prints (`rex.W syscall`,
`fs rdtsc`), which a mnemonic read after a fixed list of prefixes missed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cuda_agent.eval.guards.native_code import forbidden_instructions

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("objdump") is None, reason="no gcc")

SOURCES = {
    "intrinsic": ("#include <x86intrin.h>\nunsigned long long f(void) { return __rdtsc(); }\n", "rdtsc"),
    "rex": ('void f(void) { __asm__ volatile(".byte 0x48, 0x0f, 0x05"); }\n', "rex.W syscall"),
    "segment": ('void f(void) { __asm__ volatile(".byte 0x64, 0x0f, 0x31"); }\n', "fs rdtsc"),
    "interrupt": ('void f(void) { __asm__ volatile("int $0x80"); }\n', "int"),
}


def _object(tmp_path: Path, source: str) -> Path:
    (tmp_path / "x.c").write_text(source)
    subprocess.run(["gcc", "-O2", "-c", "x.c", "-o", "x.o"], cwd=tmp_path, check=True, capture_output=True)
    return tmp_path / "x.o"


@pytest.mark.parametrize("name", SOURCES)
def test_each_spelling_is_found_with_its_function(tmp_path, name):
    if (
        name == "intrinsic"
        and subprocess.run(["uname", "-m"], capture_output=True, text=True).stdout.strip() != "x86_64"
    ):
        pytest.skip("x86 only")
    source, shown = SOURCES[name]
    found = forbidden_instructions(_object(tmp_path, source))
    assert [f for f, _ in found] == ["f"] and shown in found[0][1], found


def test_plain_code_and_symbols_named_like_the_instructions_pass(tmp_path):
    source = (
        "long syscall_count; int rdtsc_like(int int_v) { return int_v + 1; }\n"
        "long f(long x) { syscall_count += x; return rdtsc_like((int)x) * 0x050f; }\n"
    )
    assert forbidden_instructions(_object(tmp_path, source)) == []
