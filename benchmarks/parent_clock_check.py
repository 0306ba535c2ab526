"""The parent's clock against the judge's events on the examples: per example and configuration,
the batch size R, the calibrated overhead, the parent's figure and the events' per call, their
ratio, where the judge's own time in a batch went (map, queue, synchronize, unmap) and where the
parent's went (lending to the answer, the answer to holding the copies). The issue's bar: the
parent's figure within 5% of the events on every example, and the figure repeatable within 2%
(two evaluations of the same candidate).

    python3 benchmarks/parent_clock_check.py [--examples layernorm,scale_add_small] [--repeat 2]
        [--configs noop:5:2,noop-fresh:20:8]   # calibration (noop[-fresh], the host only) : batch_ms : block GiB
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", default="", help="comma-separated example names (default: all)")
    ap.add_argument("--repeat", type=int, default=2, help="evaluations per example (repeatability)")
    ap.add_argument("--configs", default="noop:5:2", help="calibration:batch_ms:block_gib, comma-separated")
    ap.add_argument(
        "--reference-dir",
        type=Path,
        default=None,
        help="eval-<example>.json files of `cuda-agent eval --json` by main's events (same GPU): the p/e column",
    )
    args = ap.parse_args()

    import cuda_agent.eval.timing_phase as tp
    from cuda_agent.eval.clocked import FILL_MARGIN
    from cuda_agent.eval.evaluator import Evaluator
    from cuda_agent.eval.settings import EvalConfig
    from cuda_agent.eval.timing import TimingConfig
    from cuda_agent.task import load_task

    seen: list[tuple] = []
    overheads: list = []
    real_run, real_cal = tp.run_batch, tp.calibrate

    def run_batch(b, layout, overhead, sample, **kw):
        done, resp = real_run(b, layout, overhead, sample, **kw)
        if "block" not in kw:  # measured batches only
            seen.append((done, resp.phases))
        return done, resp

    def calibrate(b, **kw):
        found = real_cal(b, **kw)
        overheads.append(found)
        return found

    tp.run_batch, tp.calibrate = run_batch, calibrate

    def reference(name: str) -> float | None:
        f = args.reference_dir / f"eval-{name}.json" if args.reference_dir else None
        if f is None or not f.is_file():
            return None
        return ((json.loads(f.read_text()).get("timing")) or {}).get("median_ms")

    def show(row: tuple) -> None:
        """One row as soon as it is measured: a run cut short by its time limit still shows what it had."""
        config, name, status, reps, n, fixed, spread, wall, parent, events, fig, ph, mine, secs = row
        events = events or reference(name)  # the GPU timeline has no events of the judge's: main's figure
        ratio = fig / events if events else float("nan")
        print(
            f"{config:12} {name:18} {status:15} {reps:4d} {n:3d} {fixed:7.3f} {spread:7.4f} {wall:8.3f} "
            f"{parent:8.4f} {(events or 0):8.4f} {ratio:6.3f} {fig:8.4f} {secs:5.2f}  {ph['map_ms']:.3f}/"
            f"{ph['queue_ms']:.3f}/{ph['sync_ms']:.3f}/{ph['unmap_ms']:.3f} | {mine['ipc_ms']:.3f}/"
            f"{mine['snap_ms']:.3f}"
        )
        tl = timeline_rows.get((config, name))
        if tl:
            print(f"{'':12} {'  timeline':18} " + " ".join(f"{k} {v:.4f}" for k, v in tl.items()))
        cal = overhead_phases.get((config, name), {})
        if cal:
            print(
                f"{'':12} {'  calibration':18} reps {cal.get('reps', 0):.0f} events {cal.get('events_ms', 0):.3f} "
                f"judge {cal.get('map_ms', 0):.3f}/{cal.get('queue_ms', 0):.3f}/{cal.get('sync_ms', 0):.3f}/"
                f"{cal.get('unmap_ms', 0):.3f} | parent {cal.get('ipc_ms', 0):.3f}/{cal.get('snap_ms', 0):.3f}"
            )

    print(
        f"{'config':12} {'example':18} {'status':15} {'R':>4} {'n':>3} {'ovh':>7} {'spread':>7} {'wall':>8} "
        f"{'parent':>8} {'events':>8} {'p/e':>6} {'fig':>8} {'t_s':>5}  judge map/queue/sync/unmap | parent ipc/snap"
    )
    names = [n for n in args.examples.split(",") if n] or sorted(
        p.name for p in (ROOT / "examples").iterdir() if (p / "candidate").is_dir()
    )
    rows = []
    overhead_phases: dict = {}
    timeline_rows: dict = {}
    for config in args.configs.split(","):
        calibration, batch_ms, block_gib = config.split(":")
        tp.CALIBRATION, tp.BLOCK_BYTES = calibration, int(float(block_gib) * 2**30)
        with tempfile.TemporaryDirectory() as cache:
            for name in names:
                ex = ROOT / "examples" / name
                cfg = EvalConfig(cache_dir=Path(cache), baselines=[], timing=TimingConfig(batch_ms=float(batch_ms)))
                with Evaluator(load_task(str(ex / "model.py")), cfg, ahead="first") as ev:
                    medians = []
                    for _ in range(args.repeat):
                        seen.clear()
                        overheads.clear()
                        v = ev.evaluate(ex / "candidate")
                        t = v.timing
                        if t is None or not seen:
                            print(f"{config} {name}: {v.status} {v.error or [f.message for f in v.findings]}")
                            break
                        medians.append(t.median_ms)
                        ph = {
                            k: statistics.median(p.get(k, 0.0) for _, p in seen)
                            for k in ("map_ms", "queue_ms", "sync_ms", "unmap_ms")
                        }
                        mine = {
                            k: statistics.median(d.parent_phases.get(k, 0.0) for d, _ in seen)
                            for k in ("ipc_ms", "snap_ms")
                        }
                        o = overheads[0]
                        overhead_phases[(config, name)] = o.phases
                        if all("after_fill_ms" in d.parent_phases for d, _ in seen):  # the GPU timeline
                            med = {
                                k: statistics.median(d.parent_phases[k] for d, _ in seen)
                                for k in ("lead_ms", "fill_ms", "after_fill_ms", "total_ms")
                            }
                            nbytes = seen[0][0].parent_phases["nbytes"]
                            r = t.batch_reps or 1
                            timeline_rows[(config, name)] = med | {
                                "tail_min": o.fixed,
                                "MiB": nbytes / 2**20,
                                "fill_cal": o.fill(nbytes),
                                "after_fill-tail/R": (med["after_fill_ms"] - o.fixed) / r,
                                "total-fill_cal-tail/R": (
                                    med["total_ms"] - o.fill(nbytes) * (1 + FILL_MARGIN) - o.fixed
                                )
                                / r,
                            }
                        wall = statistics.median(d.wall_ms for d, _ in seen)
                        rows.append(
                            (
                                config,
                                name,
                                v.status,
                                t.batch_reps,
                                t.batches,
                                o.fixed,
                                o.spread,
                                wall,
                                t.parent_median_ms,
                                t.event_median_ms,
                                t.median_ms,
                                ph,
                                mine,
                                v.seconds.get("timing", 0.0),
                            )
                        )
                        show(rows[-1])
                if len(medians) > 1:
                    spread = (max(medians) - min(medians)) / min(medians)
                    print(
                        f"{config} {name}: figure per evaluation {', '.join(f'{m:.4f}' for m in medians)} ms "
                        f"(spread {spread:.1%})"
                    )


if __name__ == "__main__":
    main()
