"""Per-task git workspace (docs/workspace.md): the files the model sees, path safety, protected
files, and the history of evaluated versions as commits with metric trailers."""

from .paths import PROTECTED, WorkspaceError
from .trailers import VersionInfo
from .workspace import Workspace, WorkspaceRecord

__all__ = ["PROTECTED", "VersionInfo", "Workspace", "WorkspaceError", "WorkspaceRecord"]
