"""A small, honest stand-in for cuda_agent.workspace.Workspace (its `root` and `resolve` rules),
so the tools can be tested before and apart from the real git workspace."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from cuda_agent.tools.base import ToolContext


class WorkspaceError(Exception):
    pass


class FakeWorkspace:
    def __init__(self, root: Path, protected: tuple[str, ...] = ("model.py",)) -> None:
        self.root = root
        self.protected = set(protected)

    def resolve(self, rel: str, *, for_write: bool = False) -> Path:
        p = PurePosixPath(rel)
        if p.is_absolute():
            raise WorkspaceError(f"{rel}: absolute paths are not allowed; give a path relative to the workspace")
        if ".." in p.parts:
            raise WorkspaceError(f"{rel}: '..' is not allowed; paths stay inside the workspace")
        if ".git" in p.parts:
            raise WorkspaceError(f"{rel}: .git is off limits")
        full = self.root / p
        real = full.resolve()
        if not real.is_relative_to(self.root.resolve()):
            raise WorkspaceError(f"{rel}: points outside the workspace")
        if for_write and real.relative_to(self.root.resolve()).as_posix() in self.protected:
            raise WorkspaceError(f"{rel} is protected (read-only); write your code in model_new.py and kernels/")
        return full


class WorkspaceRules(FakeWorkspace):
    """The real workspace's path rules (cuda_agent.workspace.paths) on the same folder, so the tools
    are also checked against what they will meet in a run."""

    def resolve(self, rel: str, *, for_write: bool = False) -> Path:
        from cuda_agent.workspace.paths import resolve_in

        return resolve_in(self.root.resolve(), rel, for_write=for_write)


@pytest.fixture(params=["fake", "real-rules"])
def ws(request, tmp_path) -> FakeWorkspace:
    if request.param == "real-rules":
        pytest.importorskip("cuda_agent.workspace.paths", reason="cuda_agent.workspace is not there yet")
    root = tmp_path / "ws"
    (root / "kernels").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "model.py").write_text("import torch\n\nclass Model(torch.nn.Module):\n    pass\n")
    (root / "model_new.py").write_text("import torch\n\n\ndef forward(x):\n    return x\n")
    (root / "kernels" / "add.cu").write_text('extern "C" void add(float* a, int n) {}\n')
    return FakeWorkspace(root) if request.param == "fake" else WorkspaceRules(root)


@pytest.fixture
def ctx(ws) -> ToolContext:
    return ToolContext(workspace=ws)
