"""The object cache is keyed by every file nvcc read (its dependency list), whatever its name and
however it was included: a header an `#include` macro names was missing from the key, and a wrong
edit to it was scored on the previous object. Attacked here through macros, names with no suffix,
subfolders and -I folders; the cache must still hit when nothing changed."""

from __future__ import annotations

import subprocess

import pytest

from cuda_agent.kernels import nvcc_run
from cuda_agent.kernels.build import build_kernels
from cuda_agent.kernels.depfile import DepfileError, parse_depfile

MACRO_SOURCE = """\
#include <cuda_runtime.h>
#define IMPL "impl.h"
#include IMPL
extern "C" void run(float* y, int n, cudaStream_t s) { for (int i = 0; i < n; ++i) y[i] = impl_tag()[0]; }
"""


def impl(tag: str) -> str:
    return f'extern "C" const char* impl_tag() {{ return "{tag}"; }}\n'


def _no_nvcc(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"nvcc ran on what should be a cache hit: {args[0]}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


def holds(result, tag: str) -> bool:
    """Whether the built library carries `tag` (the string the header returned)."""
    return tag.encode() in result.lib_path.read_bytes()


def test_a_header_a_macro_includes_is_part_of_the_key(candidate, build):
    candidate.write("a.cu", MACRO_SOURCE)
    candidate.write("impl.h", impl("tag-one"))
    first = build()
    assert first.ok, first.errors
    assert holds(first, "tag-one")
    candidate.write("impl.h", impl("tag-two"))
    second = build()
    assert second.ok, second.errors
    assert second.compiled == ["kernels/a.cu"] and second.lib_path != first.lib_path
    assert holds(second, "tag-two") and not holds(second, "tag-one")


def test_unchanged_rebuild_is_a_hit_and_an_old_version_comes_back(candidate, build, monkeypatch):
    candidate.write("a.cu", MACRO_SOURCE)
    candidate.write("impl.h", impl("tag-one"))
    first = build()
    candidate.write("impl.h", impl("tag-two"))
    second = build()
    assert first.ok and second.ok and second.compiled == ["kernels/a.cu"]
    _no_nvcc(monkeypatch)
    again = build()
    assert again.ok and again.cached and again.compiled == [] and again.lib_path == second.lib_path
    candidate.write("impl.h", impl("tag-one"))  # the manifest keeps both versions
    back = build()
    assert back.ok and back.cached and back.lib_path == first.lib_path and holds(back, "tag-one")


def test_the_same_source_in_another_folder_is_checked_against_its_own_headers(cache_dir, tmp_path):
    """One cache serves many candidate folders (versions, workspaces): an entry recorded for one
    folder's impl.h must not serve another folder whose impl.h differs."""
    built = {}
    for tag in ("tag-one", "tag-two", "tag-one"):
        kernels = tmp_path / f"{tag}-{len(built)}" / "kernels"
        kernels.mkdir(parents=True)
        (kernels / "a.cu").write_text(MACRO_SOURCE)
        (kernels / "impl.h").write_text(impl(tag))
        built[len(built)] = result = build_kernels(kernels, cache_dir)
        assert result.ok, result.errors
        assert holds(result, tag)
    assert built[1].compiled == ["kernels/a.cu"]
    assert built[2].cached and built[2].lib_path == built[0].lib_path  # the same files: the same object


@pytest.mark.parametrize("name", ["impl", "detail/deeper/impl.txt", "my impl $1 #2.h"])
def test_headers_of_any_name_and_folder_are_covered(candidate, build, name):
    """No suffix, a subfolder (named through stringising macros), blanks and make's special characters."""
    candidate.write(
        "a.cu",
        MACRO_SOURCE.replace(
            '#define IMPL "impl.h"',
            (
                f"#define STR(x) #x\n#define XSTR(x) STR(x)\n#define IMPL XSTR({name})"
                if "/" in name
                else f'#define IMPL "{name}"'
            ),
        ),
    )
    candidate.write(name, impl("tag-one"))
    first = build()
    assert first.ok, first.errors
    assert first.reads["kernels/a.cu"] == ["kernels/a.cu", f"kernels/{name}"]
    assert set(first.inputs) == {"kernels/a.cu", f"kernels/{name}"}
    candidate.write(name, impl("tag-two"))
    second = build()
    assert second.ok and second.compiled == ["kernels/a.cu"] and holds(second, "tag-two")


def test_a_header_of_an_include_folder_is_covered(candidate, build, tmp_path):
    include = tmp_path / "include"
    include.mkdir()
    (include / "extra.h").write_text(impl("tag-one"))
    candidate.write("a.cu", MACRO_SOURCE.replace('#define IMPL "impl.h"', "#define IMPL <extra.h>"))
    first = build(extra_flags=[f"-I{include}"])
    assert first.ok, first.errors
    assert str((include / "extra.h").resolve()) in first.inputs  # outside the candidate: named absolutely
    (include / "extra.h").write_text(impl("tag-two"))
    second = build(extra_flags=[f"-I{include}"])
    assert second.ok and second.compiled == ["kernels/a.cu"] and holds(second, "tag-two")


def test_a_file_that_has_include_finds_later_is_not_served_from_the_cache(candidate, build):
    """`__has_include` that found nothing read nothing, so nvcc's list cannot show it: a red-team
    edit scored a wrong source (x*3 under the flag) on the object of the right one."""
    candidate.write("a.cu", MACRO_SOURCE + '#if __has_include("flag.h")\n#error flag.h is there\n#endif\n')
    candidate.write("impl.h", impl("tag-one"))
    first = build()
    assert first.ok, first.errors
    candidate.write("flag.h", "")
    second = build()
    assert not second.ok and "flag.h is there" in second.errors


def test_a_header_that_shadows_another_is_not_served_from_the_cache(candidate, build):
    """sub/y.h includes "x.h": a sub/x.h written later is found before kernels/x.h."""
    candidate.write("a.cu", MACRO_SOURCE.replace('#define IMPL "impl.h"', '#define IMPL "sub/y.h"'))
    candidate.write("sub/y.h", '#include "x.h"\n')
    candidate.write("x.h", impl("tag-one"))
    first = build()
    assert first.ok and holds(first, "tag-one"), first.errors
    candidate.write("sub/x.h", impl("tag-two"))
    second = build()
    assert second.ok and second.compiled == ["kernels/a.cu"], second.errors
    assert holds(second, "tag-two") and not holds(second, "tag-one")
    assert "kernels/sub/x.h" in second.inputs


def test_two_listings_that_join_alike_are_two_keys(candidate, build):
    """A name may hold a newline: "b\nimpl.h" must not key like the two files b and impl.h."""
    has_impl = '#if __has_include("impl.h")\n#error impl.h is there\n#endif\n'
    candidate.write("a.cu", MACRO_SOURCE.replace('#define IMPL "impl.h"', '#define IMPL "x.h"') + has_impl)
    candidate.write("x.h", impl("tag-one"))
    (candidate.kernels / "b\nimpl.h").write_text("")
    first = build()
    assert first.ok, first.errors
    (candidate.kernels / "b\nimpl.h").unlink()
    candidate.write("b", "")
    candidate.write("impl.h", "")
    second = build()
    assert not second.ok and "impl.h is there" in second.errors


@pytest.mark.parametrize("name", ["build/impl.h", "impl.o", ".cache/deep/impl.h", "__pycache__/impl.h"])
def test_a_header_under_a_build_outputs_name_fails_the_build(candidate, build, name):
    """A version never holds build outputs (the commit and the content hash leave them out): a
    candidate whose code lived in kernels/build/impl.h was judged, and its version could not build."""
    candidate.write("a.cu", MACRO_SOURCE.replace('#define IMPL "impl.h"', f'#define IMPL "{name}"'))
    candidate.write(name, impl("tag-one"))
    result = build()
    assert not result.ok
    assert f"kernels/{name} is read by kernels/a.cu but a version never holds it" in result.errors
    assert "give it another name under kernels/" in result.errors


def test_inputs_hold_the_candidates_files_not_the_toolkits(candidate, build):
    candidate.write(
        "a.cu", MACRO_SOURCE.replace("#include <cuda_runtime.h>", "#include <cuda_runtime.h>\n#include <vector>")
    )
    candidate.write("impl.h", impl("tag-one"))
    result = build()
    assert result.ok, result.errors
    assert list(result.inputs) == ["kernels/a.cu", "kernels/impl.h"]
    assert all(len(sha) == 64 for sha in result.inputs.values())


def test_a_file_edited_while_nvcc_ran_is_not_recorded(candidate, build, monkeypatch):
    """Which version such an object holds is unknown: the next build compiles again."""
    candidate.write("a.cu", MACRO_SOURCE)
    header = candidate.write("impl.h", impl("tag-one"))
    real = nvcc_run.run_nvcc

    def touching(*args, **kwargs):
        result = real(*args, **kwargs)
        header.write_text(header.read_text())  # the same bytes, written after nvcc read them
        return result

    monkeypatch.setattr(nvcc_run, "run_nvcc", touching)
    first = build()
    monkeypatch.setattr(nvcc_run, "run_nvcc", real)
    assert first.ok, first.errors
    again = build()
    assert again.ok and again.compiled == ["kernels/a.cu"]
    assert build().cached


def test_a_dependency_that_is_no_plain_file_fails_the_build_in_one_line(candidate, build):
    candidate.write("a.cu", '#define DEV "/dev/null"\n#include DEV\nextern "C" void f(cudaStream_t s) {}\n')
    result = build()
    assert not result.ok
    assert "/dev/null" in result.errors and "include only files of kernels/" in result.errors


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("dep: a.cu \\\n  b.h\n", ["a.cu", "b.h"]),
        ("dep : a.cu my\\ impl.h\n", ["a.cu", "my impl.h"]),
        # 2N+1 backslashes before a blank: N and the blank; 2N: N, then a break
        ("dep: a\\\\\\ b.h c\\\\ d.h\n", ["a\\ b.h", "c\\", "d.h"]),
        ("dep : x#1.h $HOME.h a$$b.h\r\n", ["x#1.h", "$HOME.h", "a$$b.h"]),  # nvcc writes '$' and '#' as they are
        ("dep: dir\\sub.h\n", ["dir\\sub.h"]),
    ],
)
def test_parse_depfile(text, names):
    assert parse_depfile(text) == names


def test_parse_depfile_refuses_another_rule():
    with pytest.raises(DepfileError, match="does not start with 'dep :'"):
        parse_depfile("other.o: a.cu\n")
