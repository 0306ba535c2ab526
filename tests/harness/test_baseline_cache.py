"""The baseline cache trusts nothing it did not tag: a tampered, moved, untagged or foreign-key
entry is ignored (and timed again by the evaluator), writes are atomic and concurrent writers keep
each other's entries."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cuda_agent.eval.baselines import REJECTED_NOTE, TIMED_NOTE, BaselineCache, timed_now, timing_from
from cuda_agent.eval.timing import TimingConfig

KEY = BaselineCache.key("0123456789abcdef", "NVIDIA H200", "2.13.0", ["float32"], "eager", TimingConfig())
OTHER = BaselineCache.key("0123456789abcdef", "NVIDIA A100", "2.13.0", ["float32"], "eager", TimingConfig())


def entry(ms: float = 1.25) -> dict:
    t = {
        "median_ms": ms,
        "mean_ms": ms,
        "min_ms": ms,
        "max_ms": ms,
        "p20_ms": ms,
        "p80_ms": ms,
        "reps": 100,
        "warmup": 3,
        "input_sets": 2,
    }
    return {"timing": t, "measured_at": "2026-01-01T00:00:00"}


@pytest.fixture
def cache(tmp_path) -> BaselineCache:
    c = BaselineCache(tmp_path / "baselines.json")
    c.put(KEY, entry())
    return c


def edit(cache: BaselineCache, fn) -> None:
    data = json.loads(cache.path.read_text())
    fn(data)
    cache.path.write_text(json.dumps(data))


def rejected(cache: BaselineCache, key: str = KEY) -> bool:
    notes: list[str] = []
    got = cache.get(key, notes=notes)
    if got is None:
        assert notes == [REJECTED_NOTE] and cache.rejected[-1] == key
        return True
    assert notes == []
    return False


def test_an_entry_reads_back_with_a_private_key(cache):
    assert cache.get(KEY) == entry() and timing_from(cache.get(KEY)).median_ms == 1.25
    assert cache.get(OTHER) is None and cache.rejected == []  # simply absent: not a rejection
    rec = json.loads(cache.path.read_text())[KEY]
    assert len(rec["tag"]) == 64 and rec["fields"]["device_name"] == "NVIDIA H200"
    assert stat.S_IMODE(os.stat(cache.key_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(cache.key_path.parent).st_mode) == 0o700
    assert len(cache.key_path.read_bytes()) == 32
    assert not [p for p in cache.path.parent.iterdir() if p.name.startswith(".baselines-")]  # no temp left


def test_tampered_timing_is_rejected(cache):
    # what the review did: a slower "baseline" makes any candidate look 300x faster
    edit(cache, lambda d: d[KEY]["timing"].update(median_ms=383.3))
    assert rejected(cache)


def test_an_added_field_is_rejected(cache):
    edit(cache, lambda d: d[KEY].update(note="hi"))
    assert rejected(cache)


@pytest.mark.parametrize(
    "field, value",
    [
        ("task_hash", "fedcba9876543210"),
        ("device_name", "NVIDIA A100"),
        ("torch_version", "2.0.0"),
        ("dtypes", "float16"),
        ("mode", "compile:default"),
        ("timing", "flush_l2=False"),
    ],
)
def test_tampered_key_fields_are_rejected(cache, field, value):
    edit(cache, lambda d: d[KEY]["fields"].update({field: value}))
    assert rejected(cache)


def test_an_entry_moved_to_another_key_is_rejected(cache):
    # a slow GPU's honest entry copied under a fast GPU's key: tag valid, fields not the lookup's
    edit(cache, lambda d: d.update({OTHER: d[KEY]}))
    assert rejected(cache, OTHER)
    edit(cache, lambda d: d[OTHER]["fields"].update(device_name="NVIDIA A100"))  # fields fixed: tag fails
    assert rejected(cache, OTHER)
    assert not rejected(cache, KEY)


@pytest.mark.parametrize(
    "damage",
    [
        lambda r: r.pop("tag"),
        lambda r: r.update(tag=""),
        lambda r: r.update(tag=None),
        lambda r: r.update(tag="0" * 64),
        lambda r: r.pop("fields"),
    ],
)
def test_missing_or_empty_tag_is_rejected(cache, damage):
    edit(cache, lambda d: damage(d[KEY]))
    assert rejected(cache)


def test_an_entry_in_the_old_format_is_rejected(cache):
    cache.path.write_text(json.dumps({KEY: entry()}))  # what the cache wrote before it tagged entries
    assert rejected(cache)


def test_a_miss_says_the_baselines_are_timed_now_once(cache):
    notes: list[str] = []
    assert cache.get(OTHER, notes=notes) is None and cache.get(OTHER, notes=notes) is None
    assert notes == [TIMED_NOTE] and timed_now(notes) and cache.rejected == []
    found: list[str] = []
    assert cache.get(KEY, notes=found) is not None and found == [] and not timed_now(found)


def test_a_note_is_added_once(cache):
    edit(cache, lambda d: d[KEY]["timing"].update(median_ms=9.0))
    notes: list[str] = []
    cache.get(KEY, notes=notes)
    cache.get(KEY, notes=notes)
    assert notes == [REJECTED_NOTE]


def test_a_different_key_file_rejects_every_entry(cache):
    cache.key_path.write_bytes(os.urandom(32))
    assert rejected(cache)


@pytest.mark.parametrize("damage", ["short", "loose_mode", "loose_folder", "symlink", "missing"])
def test_an_untrusted_key_file_is_replaced_and_the_entry_recomputed(cache, tmp_path, damage):
    key = cache.key_path
    if damage == "short":
        key.write_bytes(key.read_bytes()[:16])
    elif damage == "loose_mode":
        os.chmod(key, 0o644)  # someone else may have read it: it signs nothing any more
    elif damage == "loose_folder":
        os.chmod(key.parent, 0o777)
    elif damage == "symlink":
        (tmp_path / "elsewhere.key").write_bytes(key.read_bytes())
        os.chmod(tmp_path / "elsewhere.key", 0o600)
        key.unlink()
        key.symlink_to(tmp_path / "elsewhere.key")
    else:
        key.unlink()
    assert rejected(cache)
    cache.put(KEY, entry(2.5))  # the evaluator times it again and writes it back
    assert cache.get(KEY) == entry(2.5)
    assert not key.is_symlink() and stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(key.parent).st_mode) == 0o700 and len(key.read_bytes()) == 32


def test_a_rejected_entry_is_overwritten_and_others_are_kept(cache):
    cache.put(OTHER, entry(3.0))
    edit(cache, lambda d: d[KEY]["timing"].update(median_ms=383.3))
    assert rejected(cache)
    cache.put(KEY, entry(1.5))
    assert cache.get(KEY) == entry(1.5) and cache.get(OTHER) == entry(3.0)


def test_a_garbled_file_is_an_empty_cache(cache):
    cache.path.write_text("{not json")
    assert cache.get(KEY) is None
    cache.put(OTHER, entry())
    assert cache.get(OTHER) == entry()


def test_put_refuses_reserved_names(cache):
    with pytest.raises(ValueError):
        cache.put(KEY, {**entry(), "tag": "x"})


WRITER = textwrap.dedent("""
    import sys
    from cuda_agent.eval.baselines import BaselineCache
    from cuda_agent.eval.timing import TimingConfig
    path, who, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    c = BaselineCache(__import__("pathlib").Path(path))
    for i in range(n):
        k = BaselineCache.key(f"task{who:02d}{i:03d}", "NVIDIA H200", "2.13.0", ["float32"], "eager", TimingConfig())
        c.put(k, {"timing": {"median_ms": who + i / 1000}, "measured_at": str(i)})
""")


def test_concurrent_writers_keep_every_entry(tmp_path):
    # several evaluators of a batch write at once; the key does not exist yet either
    path = tmp_path / "cache" / "baselines.json"
    procs, n = 6, 25
    ps = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(w), str(n)]) for w in range(procs)]
    assert [p.wait(timeout=120) for p in ps] == [0] * procs
    cache = BaselineCache(path)
    data = json.loads(path.read_text())
    assert len(data) == procs * n
    for w in range(procs):
        for i in range(n):
            k = BaselineCache.key(f"task{w:02d}{i:03d}", "NVIDIA H200", "2.13.0", ["float32"], "eager", TimingConfig())
            assert cache.get(k) == {"timing": {"median_ms": w + i / 1000}, "measured_at": str(i)}
    assert cache.rejected == []
    assert [p.name for p in (path.parent / ".keys").iterdir()] == ["baselines.key"]


# -- through the evaluator (CPU): a poisoned entry is timed again and overwritten -------------------

TASK = Path(__file__).parent / "cpu_task" / "model.py"


def _evaluator(tmp_path, **timing):
    from cuda_agent.eval.evaluator import Evaluator
    from cuda_agent.eval.settings import EvalConfig
    from cuda_agent.eval.timing import TimingConfig
    from cuda_agent.task import load_task

    cfg = EvalConfig(
        device="cpu",
        baselines=["eager"],
        timeout_s=60,
        baseline_timeout_s=120,
        timing=TimingConfig(**{"warmup_ms": 5, "min_batches": 2, "max_batches": 3, "budget_ms": 30, **timing}),
        cache_dir=tmp_path / "cache",
    )
    return Evaluator(load_task(str(TASK)), cfg, ahead="none")


def test_the_evaluator_times_a_poisoned_entry_again(tmp_path):
    with _evaluator(tmp_path) as ev:
        first, cached = ev.time_baselines()
        assert cached == 0 and first.eager is not None
        (key,) = json.loads(ev.baseline_cache.path.read_text())
        edit(ev.baseline_cache, lambda d: d[key]["timing"].update(median_ms=383.3))
        again, cached = ev.time_baselines()
        assert cached == 0 and again.eager.median_ms < 383.3
        assert ev.baseline_cache.rejected == [key]
        assert ev.baseline_cache.get(key)["timing"]["median_ms"] == again.eager.median_ms  # overwritten, tagged
        third, cached = ev.time_baselines()
        assert cached == 1 and third.eager == again.eager


def test_the_first_verdict_says_its_baselines_were_timed_now_and_the_next_that_they_were_cached(tmp_path):
    """`cuda-agent eval` timed them in the same run: it says so, not "cached" (issue 27 item 6)."""
    from rich.console import Console

    from cuda_agent.eval.render import render_verdict

    def baselines_row(verdict) -> str:
        console = Console(record=True, width=200)
        render_verdict(verdict, console)
        return next(line for line in console.export_text().splitlines() if line.startswith("baselines"))

    with _evaluator(tmp_path) as ev:
        first, cached = ev.time_baselines()
        assert cached == 0 and TIMED_NOTE in first.notes
        assert "timed now, cached for the next evaluations" in baselines_row(first)
        second, cached = ev.time_baselines()
        assert cached == 1 and not timed_now(second.notes)
        assert "cached (timed once per task" in baselines_row(second)


def test_the_verdict_says_the_entry_was_timed_again(tmp_path):
    with _evaluator(tmp_path) as ev:
        ev.time_baselines()
        (key,) = json.loads(ev.baseline_cache.path.read_text())
        edit(ev.baseline_cache, lambda d: d[key]["timing"].update(median_ms=383.3))
        verdict, _ = ev.time_baselines()
        assert REJECTED_NOTE in verdict.notes


@pytest.mark.parametrize(
    "change",
    # max_batch_reps stays well above what this 0.02 ms task reaches: at 64, a loaded 2-core host's overhead
    # left the batch's work under the resolution floor ("not timed", so nothing to cache) in CI
    [{"batch_ms": 1.0}, {"max_batch_reps": 2048}, {"warmup_ms": 1.0}, {"max_batches": 4}, {"reps_rounding": "pow2"}],
)
def test_a_baseline_timed_another_way_is_not_reused(tmp_path, change):
    """Without the L2 flush (a warm cache) or with less warm-up (clocks still ramping) the same
    reference times differently: a cached figure is only compared with a candidate timed the same way."""
    with _evaluator(tmp_path) as ev:
        _, cached = ev.time_baselines()
        assert cached == 0
    with _evaluator(tmp_path, **change) as ev:
        _, cached = ev.time_baselines()
        assert cached == 0  # timed again, under its own key
        _, cached = ev.time_baselines()
        assert cached == 1
    assert len(json.loads((tmp_path / "cache" / "baselines.json").read_text())) == 2
    with _evaluator(tmp_path) as ev:
        assert ev.time_baselines()[1] == 1  # the first way's entry is still there


def test_a_baseline_too_short_to_resolve_says_so_and_is_not_cached(tmp_path):
    """One call per batch (0.02 ms) is far under nine times a host round trip's error: the note says
    the baseline was not timed and why, not a judge log tail, and nothing is cached."""
    with _evaluator(tmp_path, max_batch_reps=1) as ev:
        verdict, cached = ev.time_baselines()
        assert cached == 0 and verdict.eager is None
        (note,) = [n for n in verdict.notes if n.startswith("eager baseline failed")]
        assert "not timed: a batch of 1 calls" in note
        path = tmp_path / "cache" / "baselines.json"
        assert not path.exists() or not json.loads(path.read_text())


def test_a_new_figure_rule_is_a_new_key(monkeypatch):
    """A figure made by another rule (the events trusted within 5%, before rule 2) is not comparable."""
    from cuda_agent.eval import baselines

    monkeypatch.setattr(baselines, "FIGURE_RULE", baselines.FIGURE_RULE + 1)
    assert BaselineCache.key("0123456789abcdef", "NVIDIA H200", "2.13.0", ["float32"], "eager", TimingConfig()) != KEY
