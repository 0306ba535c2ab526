"""The terminal app: a run folder watched and steered (docs/tui.md). Needs the `tui` extra."""
