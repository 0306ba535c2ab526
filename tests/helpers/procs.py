"""Looking for processes from outside a jail: pids inside it are its own, so tests look for a
marker in command lines (e.g. `sleep 100.101`) across the whole machine."""

from __future__ import annotations

from pathlib import Path


def running(marker: str) -> bool:
    """Whether a live (not zombie) process on this machine has `marker` in its command line."""
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and marker in (p / "cmdline").read_bytes().decode(errors="replace") \
                    and (p / "stat").read_text().split(")")[-1].split()[0] != "Z":
                return True
        except OSError:
            continue
    return False
