"""`cuda-agent doctor`: print what this machine has; exit 1 when something required is missing."""

from __future__ import annotations

import json

import typer

from cuda_agent.doctor import exit_code, render, run_checks


def doctor(
    model: str | None = typer.Option(None, "--model", help="Model to check the API key of (else $CUDA_AGENT_MODEL)."),
    api_base: str | None = typer.Option(
        None, "--api-base", help="OpenAI-compatible server the model is on (else $CUDA_AGENT_API_BASE); no key needed."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the checks as JSON instead of a table."),
) -> None:
    checks = run_checks(model, api_base)
    code = exit_code(checks)
    if json_out:
        typer.echo(json.dumps({"ok": code == 0, "checks": [c.model_dump() for c in checks]}, indent=2))
    else:
        from rich.console import Console

        render(checks, Console())
    raise typer.Exit(code)
