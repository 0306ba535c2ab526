"""Wall time of `cuda-agent eval` in a new process after an edit, baselines cached (issue 13's cold
path), and of a candidate the static guards reject (no torch, no CUDA).

For each example: one `eval --json` fills the build and baselines caches (and, unless --no-server,
starts the warm eval server), then each rep waits --pause seconds (a person's edit), edits the
candidate's first .cu (a comment with the rep number: a real rebuild) and runs `eval --json` again
in a new process. The verdict's `seconds` say where the time went; `server` whether a warm server
answered (its pid, and whether its evaluator was reused).

    python benchmarks/cold_eval.py [--examples layernorm,gemm_bias_relu] [--reps 3] [--pause 5]
                                   [--no-compile] [--no-server] [--json-out F]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("static", "build", "audit", "start_wait", "load", "correctness", "timing", "baselines", "total")


FLAGS: list[str] = []
ENV = dict(os.environ)
SERVERS: set[int] = set()  # warm eval servers the evals used: stopped at the end (they hold GPU memory)


def run_eval(task: Path, candidate: Path) -> tuple[float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "cuda_agent.cli", "eval", str(task), "--candidate", str(candidate), "--json", *FLAGS],
        capture_output=True,
        text=True,
        timeout=900,
        env=ENV,
    )
    wall = time.perf_counter() - t0
    try:
        out = json.loads(proc.stdout)
        verdict = out["verdict"]
    except (ValueError, KeyError):
        raise SystemExit(f"no JSON verdict (exit {proc.returncode}): {proc.stderr.strip()[-500:]}") from None
    if out.get("server"):
        SERVERS.add(out["server"]["pid"])
    verdict["server"] = "reused" if (out.get("server") or {}).get("reused") else "new" if out.get("server") else "none"
    return wall, verdict


def add(rows: list, row: dict) -> None:
    rows.append(row)
    print(json.dumps(row), flush=True)  # a run cut short still shows what it measured


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", default="layernorm,gemm_bias_relu")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--no-compile", action="store_true", help="no torch.compile baseline (its first timing is slow)")
    ap.add_argument("--no-server", action="store_true", help="each eval in its own process, no warm server")
    ap.add_argument("--pause", type=float, default=5.0, help="seconds between evals: the time a person takes to edit")
    a = ap.parse_args()
    if a.no_compile:
        FLAGS.append("--no-compile-baseline")
    ENV["CUDA_AGENT_EVAL__SERVER_IDLE_S"] = "0" if a.no_server else "120"  # whatever the caller's environment says
    rows = []
    with tempfile.TemporaryDirectory(prefix="cold-eval-") as tmp:
        for name in a.examples.split(","):
            ex = ROOT / "examples" / name
            cand = Path(tmp) / name
            shutil.copytree(ex / "candidate", cand, ignore=shutil.ignore_patterns("__pycache__", "build"))
            wall, v = run_eval(ex / "model.py", cand)  # fills the caches
            add(
                rows,
                {
                    "example": name,
                    "run": "first (fills caches)",
                    "wall_s": wall,
                    "status": v["status"],
                    "server": v["server"],
                    "seconds": v.get("seconds", {}),
                },
            )
            cu = sorted((cand / "kernels").glob("*.cu"))[0]
            for rep in range(a.reps):
                time.sleep(a.pause)
                cu.write_text(cu.read_text() + f"\n// edit {rep}\n")
                wall, v = run_eval(ex / "model.py", cand)
                add(
                    rows,
                    {
                        "example": name,
                        "run": f"after edit {rep + 1}",
                        "wall_s": wall,
                        "status": v["status"],
                        "server": v["server"],
                        "seconds": v.get("seconds", {}),
                    },
                )
            # a statically rejected candidate (it imports ctypes), caught before torch starts
            bad = Path(tmp) / f"{name}-static"
            shutil.copytree(cand, bad)
            (bad / "model_new.py").write_text("import ctypes\n" + (bad / "model_new.py").read_text())
            wall, v = run_eval(ex / "model.py", bad)
            add(
                rows,
                {
                    "example": name,
                    "run": "statically rejected",
                    "wall_s": wall,
                    "status": v["status"],
                    "server": v["server"],
                    "seconds": v.get("seconds", {}),
                },
            )
    for pid in SERVERS:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    if a.json_out:
        a.json_out.write_text(json.dumps(rows, indent=1))
    print("| example | run | wall s | status | server | " + " | ".join(PARTS) + " |")
    print("|---|---|---|---|---|" + "---|" * len(PARTS))
    for r in rows:
        parts = " | ".join(f"{r['seconds'][k]:.2f}" if k in r["seconds"] else "-" for k in PARTS)
        print(f"| {r['example']} | {r['run']} | {r['wall_s']:.2f} | {r['status']} | {r['server']} | {parts} |")


if __name__ == "__main__":
    main()
