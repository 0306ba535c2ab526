"""cuda-agent: turn a PyTorch module into a verified, faster custom CUDA kernel."""

import os

__version__ = "0.1.0"

# litellm fetches its price map from GitHub when it is first imported, whoever imports it (a test, a
# plugin, our own client), and a background retry then logs warnings into whatever stderr is current:
# set before any import can happen, its bundled copy is used and nothing reaches the network
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")


def install_hint(extra: str) -> str:
    """The command that installs an extra (`train`, `tui`...): from the source checkout this was installed
    from with `pip install -e .` (a pyproject.toml beside the package folder), else from a package index."""
    import shlex
    from pathlib import Path

    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file():
        return f"pip install -e {shlex.quote(f'{checkout}[{extra}]')}"
    return f"pip install 'cuda-agent[{extra}]'"
