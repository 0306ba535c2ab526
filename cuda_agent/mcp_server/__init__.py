"""The per-task environment served over the Model Context Protocol (`cuda-agent mcp`): an external
agent (Claude Code, Codex CLI...) drives the same run `optimize` makes. Needs the `mcp` extra."""
