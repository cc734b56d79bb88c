"""Pydantic validation errors as lines a person can act on: the field's path, then the fix."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


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
    lines = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling"
        elif e["type"] == "missing":
            msg = "required field is missing; add it"
        lines.append(f"  {field_path(e['loc'], root)}: {msg}")
    return "\n".join(lines)
