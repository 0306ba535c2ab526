"""What a run leaves behind: the best version re-verified with more input sets (final.py), the
drop-in folder a user imports (dropin.py), and report.md with its plot (report.py).
`finalize_run` (finalize.py) does all three at the end of `optimize`."""

from .final import Attempt, Reverification, VerifiedTask, reverify, reverify_best
from .finalize import FinalOutputs, finalize_run

__all__ = ["Attempt", "FinalOutputs", "Reverification", "VerifiedTask", "finalize_run", "reverify", "reverify_best"]
