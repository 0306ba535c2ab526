"""A setting's command-line flag, declared on the setting's own field. The pydantic field is the one
declaration of a setting: its name, section, type, default, constraints and, as `description`, its
help; `Annotated[T, Flag(...)]` beside it says that the command line may give it, and how:

    context_tokens: Annotated[int | None, Flag()] = Field(None, ge=512, description="The model's window...")

Everything else is read from there (`flagged`): each command's typer options (cli_flags.py), the
flag column of `config show` and the flag a bad value is blamed on (settings.py). Plain data: no typer."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined


@dataclass(frozen=True)
class Flag:
    """name: the flag (default --the-field-name); short: a one-letter alias (-m); metavar: the value's
    name in --help; help: only for a field without a description (one in a section declared where it
    cannot carry flags: SectionFlags). sets: a switch, which takes no value and, given, sets the setting
    to this (--no-sandbox: sandbox False); None: the flag takes the setting's value. per_task: a budget a
    batch counts per task, which its --help says ("Per task: ...")."""

    name: str | None = None
    short: str | None = None
    metavar: str | None = None
    help: str | None = None
    sets: Any = None
    per_task: bool = False


class SectionFlags:
    """The flags of fields of a section whose own class does not declare them, put on the field that
    holds the section: `eval: Annotated[EvalConfig, SectionFlags(device=Flag(help=...))]`."""

    def __init__(self, **flags: Flag):
        self.flags = flags


@dataclass(frozen=True)
class FlaggedSetting:
    """One setting that a flag gives: its dotted path (llm.tools), its field, its Flag."""

    path: str
    field: FieldInfo
    flag: Flag

    @property
    def option(self) -> str:
        return self.flag.name or "--" + self.path.rpartition(".")[2].replace("_", "-")

    @property
    def switch(self) -> bool:
        return self.flag.sets is not None

    @property
    def sets(self) -> Any:
        """What a switch sets the setting to (a tuple declared: as a list, as the setting holds it)."""
        return list(self.flag.sets) if isinstance(self.flag.sets, tuple) else self.flag.sets

    def help(self) -> str:
        """The description, then which setting the flag gives (a switch: and the value it sets) and its
        default when it has one to show: `Tokens ... (setting: limits.max_steps; default 50).`"""
        text = (self.field.description or self.flag.help or "").strip()
        default = self.field.default
        note = f"setting: {self.path}"
        if self.switch:
            note += f" = {json.dumps(self.sets)}"
        elif default not in (None, PydanticUndefined) and not isinstance(default, (bool, list)):
            note += f"; default {default:g}" if isinstance(default, float) else f"; default {default}"
        text, end = (text[:-1], ".") if text.endswith(".") else (text, "")
        return f"{text} ({note}){end}" if text else f"({note})"


def flagged(model: type[BaseModel], prefix: str = "", section: dict[str, Flag] | None = None) -> list[FlaggedSetting]:
    """Every setting of `model` a flag gives, its sections' included, in declaration order; `section`:
    flags for `model`'s fields given by the field that holds it (SectionFlags)."""
    section = dict(section or {})
    found = []
    for name, field in model.model_fields.items():
        path = prefix + name
        flag = next((m for m in field.metadata if isinstance(m, Flag)), None) or section.pop(name, None)
        if flag is not None:
            found.append(FlaggedSetting(path, field, flag))
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            inner = {k: v for m in field.metadata if isinstance(m, SectionFlags) for k, v in m.flags.items()}
            found += flagged(field.annotation, path + ".", inner)
    if section:
        raise ValueError(f"SectionFlags for what {model.__name__} has no field of: {', '.join(section)}")
    return found
