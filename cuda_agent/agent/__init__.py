"""The agent: a short ReAct loop over a Model and an Environment (see docs/agent.md)."""
