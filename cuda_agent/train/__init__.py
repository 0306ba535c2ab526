"""The training path: exports of runs (export.py); the RL environment glue comes with issue 7."""
