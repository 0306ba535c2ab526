"""cuda-agent: turn a PyTorch module into a verified, faster custom CUDA kernel."""

__version__ = "0.1.0"


def install_hint(extra: str) -> str:
    """The command that installs an extra (`train`, `tui`...): from the source checkout this was installed
    from with `pip install -e .` (a pyproject.toml beside the package folder), else from a package index."""
    import shlex
    from pathlib import Path

    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file():
        return f"pip install -e {shlex.quote(f'{checkout}[{extra}]')}"
    return f"pip install 'cuda-agent[{extra}]'"
