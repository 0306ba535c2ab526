"""Batch runs over a task folder: discovery (tasks.py), the plan per task (plan.py), the runner
that starts one process per task (runner.py, child.py), results.jsonl (rows.py), the summary with
the paper's metrics (summary.py, render.py), and the task importers (importer.py)."""
