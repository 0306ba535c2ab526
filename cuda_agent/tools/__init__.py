"""The tools the model can call: one module per tool, each a `Tool` (see base.py)."""
