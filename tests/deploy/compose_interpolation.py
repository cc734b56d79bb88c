"""Compose-style variable interpolation, enough to read docker-compose.yml as Compose would.

Supports ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}, nested defaults
and $$ (a literal $), per the Compose specification's "Interpolation" section.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class InterpolationError(ValueError):
    pass


def _braced(text: str, i: int, env: Mapping[str, str]) -> tuple[str, int]:
    """Interpolate the ${...} starting at text[i] == '{'; return (value, index after '}')."""
    m = _NAME.match(text, i + 1)
    if not m:
        raise InterpolationError(f"bad variable at {text[i - 1:i + 20]!r}")
    name, j = m.group(), m.end()
    if text[j] == "}":
        return env.get(name, ""), j + 1
    op = text[j:j + 2] if text[j] == ":" else text[j]
    j += len(op)
    # the operand may itself contain ${...}
    out, depth = [], 0
    while True:
        if j >= len(text):
            raise InterpolationError(f"unclosed ${{{name}")
        c = text[j]
        if c == "$" and text[j + 1:j + 2] == "{":
            value, j = _braced(text, j + 1, env)
            out.append(value)
            continue
        if c == "}" and depth == 0:
            break
        out.append(c)
        j += 1
    operand = "".join(out)
    value, is_set = env.get(name), name in env
    if op in (":-", "-"):
        use_default = (not value) if op == ":-" else (not is_set)
        return (operand if use_default else value), j + 1
    if op in (":?", "?"):
        missing = (not value) if op == ":?" else (not is_set)
        if missing:
            raise InterpolationError(f"{name}: {operand}")
        return value, j + 1
    raise InterpolationError(f"unsupported operator {op!r} for {name}")


def interpolate_str(text: str, env: Mapping[str, str]) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "$" and text[i + 1:i + 2] == "$":
            out.append("$")
            i += 2
        elif c == "$" and text[i + 1:i + 2] == "{":
            value, i = _braced(text, i + 1, env)
            out.append(value)
        elif c == "$" and _NAME.match(text, i + 1):
            m = _NAME.match(text, i + 1)
            out.append(env.get(m.group(), ""))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return interpolate_str(value, env)
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    return value


def variables_used(text: str) -> set[str]:
    """Every variable name a compose file reads (in ${...} or $NAME), ignoring escaped $$."""
    text = text.replace("$$", "")
    return set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text)) | set(
        re.findall(r"\$([A-Za-z_][A-Za-z0-9_]*)", text))


def read_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines of a .env file (comments and blank lines skipped)."""
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    return env
