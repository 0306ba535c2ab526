"""Whether a process id names a live process (of any user): the one test the run folder's state,
the scratch sweep and the jail's cgroup sweep each make of a pid they recorded."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
