"""Pydantic validation errors as lines a person can act on: the field's path, then the fix."""

from __future__ import annotations

import re
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

# A model-level validator's message that names the field it is about first ("provider_options.zones: ..."):
# that path continues the error's own location, so the line reads as one path.
_LEADING_PATH = re.compile(r"(?P<path>[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\]|\.[A-Za-z_][A-Za-z0-9_]*)*): (?P<msg>.+)", re.S)


def field_path(loc: tuple[Any, ...], root: str = "(top level)") -> str:
    """('targets', 1, 'instance_type') -> 'targets[1].instance_type'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith("function-"):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or root


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation may hold: itself, or inside Optional, list, dict and Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        args = args[:1]
    elif origin is dict:
        args = args[1:]
    elif origin not in (list, tuple, set, frozenset, typing.Union, types.UnionType) and origin is not None:
        args = ()
    return [m for a in args for m in _models_in(a)]


def _model_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose field ``loc`` would be, walked down from ``model``; None where the walk is unsure
    (a union of two models, a location pydantic names by a validator or union member)."""
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue  # a list's index: the element's model is the one the field named
        field = model.model_fields.get(str(part))
        if field is None:
            if str(part).startswith("function-"):
                continue
            return None
        found = _models_in(field.annotation)
        model = found[0] if len(found) == 1 else None
    return model


def _valid_keys(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> str:
    """'; valid keys here: a, b, c' for an unknown field whose model is known, else ''."""
    owner = _model_at(model, loc[:-1])
    if owner is None:
        return ""
    return f"; valid keys here: {', '.join(sorted(owner.model_fields))}"


def explain(err: ValidationError, root: str = "(top level)", model: type[BaseModel] | None = None) -> str:
    """One line per error: ``targets[1].provider_options.zones: <message>``, a model-level validator's
    own leading field path joined onto where the error was raised. Given the validated ``model``, an
    unknown field's line lists the keys its place accepts."""
    lines = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        where = field_path(e["loc"], root)
        if e["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling" + _valid_keys(model, tuple(e["loc"]))
        elif e["type"] == "missing":
            msg = "required field is missing; add it"
        elif e["type"] == "value_error" and (m := _LEADING_PATH.fullmatch(msg)):
            path, msg = m["path"], m["msg"]
            where = path if where == root else where + ("" if path.startswith("[") else ".") + path
        lines.append(f"  {where}: {msg}")
    return "\n".join(lines)
