"""One whole `cuda-agent mcp` session driven by the official MCP SDK client over stdio, as an
external agent would: list the tools, read SKILL.md and the task prompt, write a candidate with
edit_file, compile, verify, benchmark, finish. It prints what the client saw (the task prompt's
GPU line, each call's first line and seconds) and the run folder's shape (versions on `best`,
trajectory records, report.md, the drop-in), and fails (exit 1) when the session did not end
with a re-verified result and a drop-in.

    python3 benchmarks/mcp_session.py [--example examples/layernorm] [--json-out F] [-- MCP FLAGS]
    python3 benchmarks/mcp_session.py --example tests/harness/cpu_task --candidate tests/harness/cpu_task/honest \
        -- --device cpu --no-compile-baseline      # a smoke run without a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
CLIENT = types.Implementation(name="mcp-session-benchmark", version="1")


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if hasattr(c, "text"))


async def session(params: StdioServerParameters, candidate: Path) -> dict:
    seen: dict = {"calls": []}

    async def call(name: str, args: dict) -> types.CallToolResult:
        t = time.perf_counter()
        r = await c.call_tool(name, args)
        body = text(r)
        seen["calls"].append(
            {
                "tool": name,
                "error": r.is_error,
                "seconds": round(time.perf_counter() - t, 2),
                "first_line": body.strip().splitlines()[0] if body.strip() else "",
                "text": body,
            }
        )
        return r

    async with Client(params, client_info=CLIENT, read_timeout_seconds=900) as c:
        seen["tools"] = [t.name for t in (await c.list_tools()).tools]
        resources = (await c.list_resources()).resources
        seen["skill_chars"] = len((await c.read_resource(resources[0].uri)).contents[0].text)
        seen["task_prompt"] = (await c.get_prompt("task")).messages[0].content.text
        for f in sorted(p for p in candidate.rglob("*") if p.is_file()):
            await call(
                "edit_file",
                {
                    "mode": "create",
                    "path": str(f.relative_to(candidate)),
                    "overwrite": True,
                    "file_text": f.read_text(),
                },
            )
        for name in ("compile", "verify", "benchmark"):
            await call(name, {})
        r = await call("finish", {"summary": "the example's hand-written candidate, through an MCP client"})
        seen["finish"] = r.structured_content
    return seen


def shape(summary: dict) -> dict:
    run_dir = Path(summary["run_dir"])
    log = subprocess.run(
        ["git", "-C", str(run_dir / "workspace"), "log", "--oneline", "best"], capture_output=True, text=True
    ).stdout.splitlines()
    kinds: dict[str, int] = {}
    for line in (run_dir / "trajectory.jsonl").read_text().splitlines():
        kind = json.loads(line).get("type", "?")
        kinds[kind] = kinds.get(kind, 0) + 1
    dropin = Path(summary.get("dropin") or run_dir / "missing")
    return {
        "run_dir": str(run_dir),
        "best_commits": log,
        "records": kinds,
        "report": Path(summary.get("report") or run_dir / "missing").is_file(),
        "dropin_files": sorted(str(p.relative_to(dropin)) for p in dropin.rglob("*") if p.is_file())
        if dropin.is_dir()
        else [],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", type=Path, default=ROOT / "examples" / "layernorm")
    ap.add_argument("--candidate", type=Path, default=None, help="default: the example's candidate/")
    ap.add_argument("--out", type=Path, default=None, help="run folder parent (default: a temporary one)")
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument("mcp_flags", nargs="*", help="after --: more flags for `cuda-agent mcp`")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="mcp-session-"))
    params = StdioServerParameters(
        command=sys.executable,
        cwd=str(ROOT),
        env=dict(os.environ),
        args=["-m", "cuda_agent.cli", "mcp", str(args.example / "model.py"), "--out", str(out), *args.mcp_flags],
    )
    t = time.perf_counter()
    seen = anyio.run(session, params, args.candidate or args.example / "candidate")
    seen["wall_s"] = round(time.perf_counter() - t, 2)
    summary = seen.get("finish") or {}
    seen["run"] = shape(summary) if summary.get("run_dir") else {}
    gpu_lines = [ln for ln in seen["task_prompt"].splitlines() if "GPU" in ln or "sm_" in ln]
    print(f"tools: {', '.join(seen['tools'])}\nSKILL.md: {seen['skill_chars']} chars")
    print("task prompt, GPU lines:\n  " + "\n  ".join(gpu_lines or ["(none)"]))
    for cl in seen["calls"]:
        print(f"{cl['tool']:>10} {cl['seconds']:7.2f} s {'ERROR ' if cl['error'] else ''}{cl['first_line'][:110]}")
    print(seen["calls"][-1]["text"])
    print(
        json.dumps(
            {k: summary.get(k) for k in ("stop_reason", "verified_reward", "verified", "report", "dropin")}, indent=1
        )
    )
    print(json.dumps(seen["run"], indent=1))
    print(f"session wall: {seen['wall_s']} s")
    if args.json_out:
        args.json_out.write_text(json.dumps(seen, indent=1))
    ok = (
        summary.get("stop_reason") == "finished"
        and (summary.get("verified_reward") or 0) >= 1
        and seen["run"].get("report")
        and "layer.py" in seen["run"].get("dropin_files", [])
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
