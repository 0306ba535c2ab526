"""The command line: thin commands composing the parts (see docs/architecture.md).

Every command module imports its heavy dependencies (torch, litellm...) inside the command, so
`cuda-agent --help` starts fast.
"""

import typer
import typer.core

from cuda_agent.cli_batch import baselines_command, batch_command, compare_command, tasks_app
from cuda_agent.cli_doctor import doctor
from cuda_agent.cli_eval import eval_command
from cuda_agent.cli_export import export_command
from cuda_agent.cli_log import log_command
from cuda_agent.cli_mcp import mcp_command
from cuda_agent.cli_optimize import optimize_command
from cuda_agent.cli_settings import config_app
from cuda_agent.cli_train import train_app
from cuda_agent.cli_tui import tui_command


def _flags_show_no_type(shown):
    """typer 0.29's rich help shows a `<bool>` type beside every flag, --help too (its plain help and
    typer before 0.28 show none): a flag takes no value, so it shows none, whichever typer is installed."""

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) and self.metavar is None else shown(self, ctx)

    return display_type_rich


if hasattr(typer.core.TyperOption, "display_type_rich"):
    typer.core.TyperOption.display_type_rich = _flags_show_no_type(typer.core.TyperOption.display_type_rich)

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="cuda-agent: turn a PyTorch module into a verified, faster custom CUDA kernel.",
)

app.command("doctor", help="Check the GPU, driver, nvcc, ncu, torch and the model key.")(doctor)
app.command("optimize", help="Run the agent on one task: a verified, faster kernel and the record of how.")(
    optimize_command
)
app.command("eval", help="Build, check, time and score one candidate against a task (no LLM).")(eval_command)
app.command(
    "export",
    help="Runs -> training data: SFT chat JSONL, RFT (best per task), verl parquet of tasks. "
    "Exit codes: 0 written, 2 bad usage, 3 nothing to write (no file is written).",
)(export_command)
app.command(
    "mcp",
    help="Serve one task's run over MCP (stdio, or streamable HTTP with --http): Claude Code, "
    "Codex or any MCP client drives the verified tools, recorded as optimize records its model.",
)(mcp_command)
app.command(
    "log",
    help="A run's history: the versions its verdict ledger records, then its commits, read without "
    "running anything its workspace holds.",
)(log_command)
app.command(
    "tui",
    help="Open a run folder in the terminal app: follow, steer, browse, resume (a run not started "
    "from the app: with --model and its options, or --script).",
)(tui_command)
app.add_typer(config_app, name="config")
app.command("batch", help="Run the agent over every task in a folder (or score candidates): resumable, on many GPUs.")(
    batch_command
)
app.command("compare", help="Two batch runs side by side: the paper's metrics and a head-to-head.")(compare_command)
app.command("baselines", help="Time eager and torch.compile for every task in a folder, once per GPU type (cached).")(
    baselines_command
)
app.add_typer(tasks_app, name="tasks")  # tasks import
app.add_typer(train_app, name="train")  # train sft, train ppo

if __name__ == "__main__":
    app()
