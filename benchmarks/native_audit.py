"""How long the native audit (cuda_agent.eval.guards.native) takes per built library.

Builds each candidate once (cached), then times `audit_library` on it: the first call of the
process (it also reads the toolkit's libcudart_static.a once, to know what the CUDA runtime
itself imports) and the median and minimum of --reps later calls.

    python benchmarks/native_audit.py                       # examples/*/candidate
    python benchmarks/native_audit.py path/to/candidate ... --reps 50
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from cuda_agent.eval.guards.native import audit_library
from cuda_agent.kernels.build import build_kernels

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("candidates", nargs="*", type=Path)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--cache", type=Path, default=None, help="build cache (default: a temporary one)")
    args = parser.parse_args()
    candidates = args.candidates or sorted((ROOT / "examples").glob("*/candidate"))
    cache = args.cache or Path(tempfile.mkdtemp(prefix="native-audit-"))
    builds = []
    for c in candidates:
        result = build_kernels(c / "kernels", cache, out_dir=Path(tempfile.mkdtemp()))
        if not result.ok:
            raise SystemExit(f"{c}: build failed:\n{result.errors}")
        builds.append((c, result))
    print(f"{'candidate':<40} {'first':>8} {'median':>8} {'min':>8}  findings")
    for i, (c, result) in enumerate(builds):
        start = time.perf_counter()
        findings = audit_library(result)
        first = time.perf_counter() - start
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            audit_library(result)
            times.append(time.perf_counter() - start)
        name = c.relative_to(ROOT).as_posix() if c.is_relative_to(ROOT) else str(c)
        print(
            f"{name:<40} {first * 1e3:7.1f}ms {statistics.median(times) * 1e3:7.1f}ms "
            f"{min(times) * 1e3:7.1f}ms  {len(findings)}" + ("  (first call of the process)" if i == 0 else "")
        )


if __name__ == "__main__":
    main()
