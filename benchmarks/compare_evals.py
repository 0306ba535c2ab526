"""Two sets of `cuda-agent eval --json` results side by side (eval-<example>.json in each folder, as
`gpu_suite.sh evals` writes them): per example the reward, the candidate's figure, eager's and
torch.compile's, both speed-ups, and B's figures and speed-ups over A's. For a change of the clock:
what decides a reward (the speed-ups) should agree even where the raw figures move together.

    python3 benchmarks/compare_evals.py A_DIR B_DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _row(path: Path) -> dict | None:
    if not path.is_file():
        return None
    d = json.loads(path.read_text())
    d = d.get("verdict", d)  # `cuda-agent eval --json` nests the verdict beside the task

    def ms(part: str) -> float:
        return ((d.get(part) or {}).get("median_ms")) or float("nan")

    return {
        "reward": d.get("reward"),
        "figure": ms("timing"),
        "eager": ms("eager"),
        "compile": ms("compiled"),
        "vs_eager": d.get("speedup_vs_eager") or float("nan"),
        "vs_compile": d.get("speedup_vs_compile") or float("nan"),
    }


def _pair(a: dict, b: dict, key: str, fmt: str) -> str:
    return f"{a[key]:{fmt}} {b[key]:{fmt}}"


def _ratio(a: dict, b: dict, key: str) -> float:
    return b[key] / a[key] if a[key] else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    args = ap.parse_args()
    names = sorted({p.stem[len("eval-") :] for d in (args.a, args.b) for p in d.glob("eval-*.json")})
    print(
        f"{'example':18} {'reward':>7} {'figure ms':>17} {'eager ms':>17} {'compile ms':>17} "
        f"{'x eager':>13} {'x compile':>13}   B/A: figure eager compile | x eager x compile"
    )
    for name in names:
        a, b = _row(args.a / f"eval-{name}.json"), _row(args.b / f"eval-{name}.json")
        if a is None or b is None:
            print(f"{name:18} missing in {'A' if a is None else 'B'}")
            continue
        print(
            f"{name:18} {a['reward']!s:>3} {b['reward']!s:>3} {_pair(a, b, 'figure', '8.4f')} "
            f"{_pair(a, b, 'eager', '8.4f')} "
            f"{_pair(a, b, 'compile', '8.4f')} {_pair(a, b, 'vs_eager', '6.2f')} {_pair(a, b, 'vs_compile', '6.2f')}   "
            f"{_ratio(a, b, 'figure'):.3f} {_ratio(a, b, 'eager'):.3f} {_ratio(a, b, 'compile'):.3f} | "
            f"{_ratio(a, b, 'vs_eager'):.3f} {_ratio(a, b, 'vs_compile'):.3f}"
        )


if __name__ == "__main__":
    main()
