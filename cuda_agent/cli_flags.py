"""A command's setting flags, made from the settings' own declarations (cuda_agent/flags.py), never
listed again: `@setting_flags("model", "llm", "limits.max_steps", ...)` puts a typer option for each
named setting (a section's name: each of its settings that has a flag) where the command's
SettingFlags parameter stands, and hands the command what was given as one SettingFlags, the flag
layer of `settings.resolve`. A new flagged field of a section is a flag of every command naming it."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, Optional, TypeVar, get_args, get_origin

import annotated_types
import typer
from pydantic import BaseModel

from cuda_agent.cli_settings import fail
from cuda_agent.flags import FlaggedSetting, flagged

Command = TypeVar("Command", bound=Callable[..., Any])

# settings that several commands take as flags, by what they are about
MODEL = ("model", "api_base", "llm")  # which model, and how it is called (optimize, batch, tui)
JUDGE = ("tools", "eval.sandbox", "eval.baselines", "eval.memory_budget_gib")  # what tools may do; the judge


class SettingFlags(Mapping[str, Any]):
    """What a command's setting flags gave: dotted setting -> value, only the flags given (a switch
    given: the value it sets)."""

    def __init__(self, given: Mapping[str, Any] | None = None):
        self._given = dict(given or {})

    def __getitem__(self, path: str) -> Any:
        return self._given[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._given)

    def __len__(self) -> int:
        return len(self._given)

    def layer(self) -> dict[str, Any]:
        """The flags as settings.resolve takes them: nested by section."""
        nested: dict[str, Any] = {}
        for path, value in self._given.items():
            *sections, name = path.split(".")
            into = nested
            for section in sections:
                into = into.setdefault(section, {})
            into[name] = value
        return nested


def setting_flags(
    *names: str, per_task: bool = False, settings: type[BaseModel] | None = None
) -> Callable[[Command], Command]:
    """Decorate a command: its parameter annotated SettingFlags becomes an option for each setting
    `names` picks, in that order, and is given what they gave. `per_task`: the budgets' help says a
    batch counts them per task. `settings`: the model the settings are read from (default Settings)."""
    if settings is None:
        from cuda_agent.settings import Settings

        settings = Settings
    chosen = _choose(settings, names)
    params = {s.path: "setting__" + s.path.replace(".", "__") for s in chosen}

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        slot = next((p for p in signature.parameters.values() if p.annotation is SettingFlags), None)
        if slot is None:
            raise TypeError(f"{command.__name__} has no parameter annotated SettingFlags for its setting flags")
        if clash := set(params.values()) & set(signature.parameters):
            raise TypeError(f"{command.__name__} has parameters named like setting flags: {', '.join(clash)}")
        parameters = list(signature.parameters.values())
        at = parameters.index(slot)
        parameters[at : at + 1] = [
            inspect.Parameter(
                params[s.path],
                slot.kind,
                default=_option(s, per_task),
                annotation=bool if s.switch else Optional[_value_type(s)[0]],
            )
            for s in chosen
        ]

        @functools.wraps(command)
        def with_flags(*args: Any, **kwargs: Any) -> Any:
            given = {}
            for s in chosen:
                value = kwargs.pop(params[s.path])
                if s.switch and value:
                    given[s.path] = s.sets
                elif not s.switch and value is not None:
                    if (choices := _value_type(s)[1]) and value not in choices:
                        fail(f"{s.option} {value}: give {', '.join(choices[:-1])} or {choices[-1]}")
                    given[s.path] = value
            return command(*args, **kwargs, **{slot.name: SettingFlags(given)})

        with_flags.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        with_flags.__annotations__ = {p.name: p.annotation for p in parameters}
        return with_flags  # type: ignore[return-value]

    return decorate


def _choose(settings: type[BaseModel], names: tuple[str, ...]) -> list[FlaggedSetting]:
    every = flagged(settings)
    chosen: dict[str, FlaggedSetting] = {}
    for name in names:
        found = [s for s in every if s.path == name or s.path.startswith(name + ".")]
        if not found:
            raise ValueError(f"{settings.__name__} has no setting with a flag at {name!r}")
        chosen.update((s.path, s) for s in found)
    return list(chosen.values())


def _value_type(s: FlaggedSetting) -> tuple[type, tuple[str, ...]]:
    """(the type the flag's value is read as, the values it may take: a Literal's, else none listed)."""
    if get_origin(s.field.annotation) is Literal:
        return str, tuple(get_args(s.field.annotation))
    kinds = [a for a in (get_args(s.field.annotation) or (s.field.annotation,)) if a is not type(None)]
    if len(kinds) != 1 or not isinstance(kinds[0], type):
        raise TypeError(f"setting {s.path}: a flag needs one plain type, not {s.field.annotation}")
    return kinds[0], ()


def _option(s: FlaggedSetting, per_task: bool) -> Any:
    """The typer option of one setting: its flag, its help, and for a value its range (the field's
    ge/le; other constraints are the settings' to check) or its choices (a Literal's)."""
    help = s.help()
    if per_task and s.flag.per_task:
        help = f"Per task: {help[0].lower()}{help[1:]}"
    names = [s.option, *([s.flag.short] if s.flag.short else [])]
    if s.switch:
        return typer.Option(False, *names, help=help)
    kind, choices = _value_type(s)
    low = next((kind(m.ge) for m in s.field.metadata if isinstance(m, annotated_types.Ge)), None)
    high = next((kind(m.le) for m in s.field.metadata if isinstance(m, annotated_types.Le)), None)
    return typer.Option(
        None, *names, help=help, min=low, max=high, metavar=s.flag.metavar or ("|".join(choices) if choices else None)
    )
