"""The kinds of model a run can talk to, by name: each entry of MODEL_KINDS makes one from the run's
settings, and says whether a run that names no kind gets it (the first entry that does is chosen:
a script given -> scripted, else litellm). Adding a kind is one entry. Each factory imports its
model's module itself: litellm is loaded only for a litellm model (GPU machines have none)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from cuda_agent.agent.interfaces import Model
    from cuda_agent.settings import Settings


class ModelKindError(ValueError):
    """No model can be made as asked: an unknown kind, or one its settings do not give enough for."""


@dataclass(frozen=True)
class ModelKind:
    make: Callable[[Settings, Path | None, int], Model]  # (settings, script, turns already answered)
    default_for: Callable[[Settings, Path | None], bool]  # whether a run that names no kind gets this one


def _scripted(settings: Settings, script: Path | None, skip: int) -> Model:
    from cuda_agent.agent.scripted_model import ScriptedModel

    if script is None:
        raise ModelKindError("the scripted model needs a script: pass --script FILE.json")
    scripted = ScriptedModel.from_json(script)
    del scripted.responses[:skip]  # one response per turn: a resumed replay goes on where it stopped
    return scripted


def _litellm(settings: Settings, script: Path | None, skip: int) -> Model:
    if not settings.model:
        raise ModelKindError('no model: pass --model, set CUDA_AGENT_MODEL, or put model = "..." in cuda-agent.toml')
    from cuda_agent.agent.litellm_model import LitellmModel

    # the [llm] section as it is: LitellmModelConfig is ModelOptions plus the client's own fields
    return LitellmModel(settings.model, api_base=settings.api_base, **settings.llm.model_dump())


MODEL_KINDS: dict[str, ModelKind] = {
    "scripted": ModelKind(_scripted, default_for=lambda settings, script: script is not None),
    "litellm": ModelKind(_litellm, default_for=lambda settings, script: True),
}


def make_model(settings: Settings, script: Path | None = None, skip: int = 0, kind: str | None = None) -> Model:
    """The model of kind `kind` (None: the first kind whose default_for says so), its first `skip`
    turns already answered (a resumed run)."""
    if kind is None:
        kind = next((name for name, k in MODEL_KINDS.items() if k.default_for(settings, script)), "")
    entry = MODEL_KINDS.get(kind)
    if entry is None:
        raise ModelKindError(f"unknown model kind {kind!r}: use one of {', '.join(MODEL_KINDS)}")
    return entry.make(settings, script, skip)
