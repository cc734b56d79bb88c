"""Fill ${NAME} / ${NAME:-default} placeholders in a settings file from the environment.

The committed files under config/ hold placeholders only; secrets reach Airflow solely through
this rendering, into a private temporary file that load_settings.sh imports and deletes. A
placeholder with no value and no default becomes empty (a connection without a secret stays
usable for its other fields), and a connection "extra" field left empty is dropped, so that e.g.
an empty endpoint_url means "the provider's default endpoint" rather than an invalid URL
(connection extras are written as the JSON string `airflow connections import` expects).
Names of unset variables are reported on stderr; values never are.

usage: render_settings.py IN.json OUT.json
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def render(value: Any, env: Mapping[str, str], unset: set[str] | None = None) -> Any:
    """Replace placeholders in every string of a JSON value; record unset names in `unset`."""
    if isinstance(value, str):

        def sub(m: re.Match) -> str:
            name, default = m.group(1), m.group(2)
            if env.get(name):
                return env[name]
            if default is None and unset is not None:
                unset.add(name)
            return default or ""

        return PLACEHOLDER.sub(sub, value)
    if isinstance(value, list):
        return [render(v, env, unset) for v in value]
    if isinstance(value, dict):
        out = {k: render(v, env, unset) for k, v in value.items()}
        if isinstance(out.get("extra"), dict):  # a connection: Airflow imports "extra" as a JSON string
            extra = {k: v for k, v in out.pop("extra").items() if v != ""}
            if extra:
                out["extra"] = json.dumps(extra)
        return out
    return value


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    src, dst = args
    try:
        data = json.load(open(src))
    except (OSError, json.JSONDecodeError) as e:
        print(f"render_settings: cannot read {src}: {e}", file=sys.stderr)
        return 2
    unset: set[str] = set()
    rendered = render(data, os.environ, unset)
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(rendered, f, indent=2)
    if unset:
        print(
            f"render_settings: {os.path.basename(src)}: not set, left empty: {', '.join(sorted(unset))}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
