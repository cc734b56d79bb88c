"""Pydantic validation errors as lines a person can act on: the field's path, then the fix."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

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


def explain(err: ValidationError, root: str = "(top level)") -> str:
    """One line per error: ``targets[1].provider_options.zones: <message>``, a model-level validator's
    own leading field path joined onto where the error was raised."""
    lines = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        where = field_path(e["loc"], root)
        if e["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling"
        elif e["type"] == "missing":
            msg = "required field is missing; add it"
        elif e["type"] == "value_error" and (m := _LEADING_PATH.fullmatch(msg)):
            path, msg = m["path"], m["msg"]
            where = path if where == root else where + ("" if path.startswith("[") else ".") + path
        lines.append(f"  {where}: {msg}")
    return "\n".join(lines)
