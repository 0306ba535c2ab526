"""Commands as README.md gives them, for tests that run what a new user would copy: read from the
file, so the README and the tests cannot drift apart."""

import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_command(prefix: str, *needles: str) -> str:
    """The one `cuda-agent ...` command in README.md's code blocks that starts with `prefix` and holds
    every needle; a line of set-up steps joined by && gives its last step."""
    found, fenced = [], False
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        step = line.split(" && ")[-1].split("#")[0].strip()
        if fenced and step.startswith(prefix) and all(n in step for n in needles):
            found.append(step)
    assert len(found) == 1, f"README.md: want one command starting {prefix!r} with {needles}, found {found}"
    return found[0]


def as_argv(command: str) -> list[str]:
    """`cuda-agent ARGS` as this interpreter runs it (the tests' environment, not an installed script)."""
    words = shlex.split(command)
    assert words[0] == "cuda-agent", command
    return [sys.executable, "-m", "cuda_agent.cli", *words[1:]]
