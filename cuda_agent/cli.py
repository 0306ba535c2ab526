"""The command line: thin commands composing the parts (see DESIGN.md).

Every command module imports its heavy dependencies (torch, litellm...) inside the command, so
`cuda-agent --help` starts fast.
"""

import typer

from cuda_agent.cli_doctor import doctor
from cuda_agent.cli_eval import eval_command
from cuda_agent.cli_optimize import optimize_command

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="cuda-agent: turn a PyTorch module into a verified, faster custom CUDA kernel.",
)


@app.callback()
def main() -> None:
    # Without a callback, typer runs a one-command app as that command.
    pass


app.command("doctor", help="Check the GPU, driver, nvcc, ncu, torch and the model key.")(doctor)
app.command("optimize", help="Run the agent on one task: a verified, faster kernel and the record of how.")(optimize_command)
app.command("eval", help="Build, check, time and score one candidate against a task (no LLM).")(eval_command)

if __name__ == "__main__":
    app()
