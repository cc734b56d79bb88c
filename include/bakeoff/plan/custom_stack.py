"""A serving stack the buyer brings: its image, its command as an argv template, its port and routes.

Why a template of words, not a command line: each item renders to exactly one argv word (a
placeholder is replaced by a validated plan value, never re-split), the boot script quotes each word
again, and no shell ever reads it, so a value cannot become code. Only the placeholders the other
engines are rendered from (``PLACEHOLDERS``) may appear; anything else in braces is refused naming the
item. The stack has no API-key or TLS switch bakeoff knows, so it listens on ``{host}``:``{port}``,
which is loopback behind the node's front (serving/front.py): the template must say both, and only
as a listening flag's whole value (any flag whose name speaks of a host, port, bind, listen or
address takes ``{host}``, ``{port}`` or ``{host}:{port}`` and nothing else; no word is a literal
address). No word anywhere in it may start a shell or hand an interpreter inline code, whatever
wrapper (``nice``, ``timeout``, ``env`` ...) comes first: a rule over every word, not over the
program alone.

The benchmark speaks OpenAI's API to it (``/v1/completions``, ``/v1/chat/completions``); readiness
asks ``health_route`` for 200 and then ``readiness_route`` for an OpenAI model list naming the model.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from bakeoff.plan.fields import Strict

CUSTOM_STACK = "custom"  # the target's stack: name that takes this block
# the target fields a template may name, as the built-in engines are rendered from them
PLACEHOLDERS = (
    "model",
    "served_model",
    "host",
    "port",
    "tensor_parallel",
    "pipeline_parallel",
    "expert_parallel",
    "gpus",
    "quantization",
    "kv_cache_dtype",
)
MAX_TEMPLATE = 1024  # characters: the boot script (16 KB on EC2) holds it beside everything else
REQUIRED = ("host", "port")  # it must listen where the front expects it (loopback, the port bakeoff picks)
_SLOT = re.compile(r"\{([^{}]*)\}")
# an HTTP path: /segment/segment, no query, no dot-dot, no spaces
ROUTE_RE = r"^/(?:[A-Za-z0-9_.~-]+(?:/[A-Za-z0-9_.~-]+)*)?$"
# the program a template starts (the container's entrypoint): a name or an absolute path, nothing to expand
_PROGRAM = re.compile(r"^[A-Za-z0-9_.+-]+$|^/[A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)*$")
# a shell anywhere in the argv (the program, or behind a wrapper such as nice, timeout, env) would read
# a value as code again: the template is argv, run without one
SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ash", "ksh", "csh", "tcsh", "fish", "busybox", "env", "eval", "exec", "xargs"}
)
# a program that runs code given on its command line: refused with such a flag before its script or -m
_INTERPRETER = re.compile(
    r"^(python|pypy|perl|ruby|node|nodejs|php|lua|luajit|julia|rscript|tclsh|deno|bun|pwsh|awk|gawk|mawk|nawk)"
    r"[0-9.]*$",
    re.I,
)
_CODE_FLAG = re.compile(r"^-[A-Za-z]*[ceprE][A-Za-z]*$|^--(eval|command|exec|execute|print|code)(=.*)?$")
# a flag that sets where the server listens, in any spelling: --host, --port=, --bind-address, -listen_addr
_LISTEN_FLAG = re.compile(r"^-{1,2}[a-z0-9-]*(host|port|bind|listen|addr)[a-z0-9-]*$")
_LISTEN_VALUES = ("{host}", "{port}", "{host}:{port}")
# a literal address or host:port: 0.0.0.0, [::], ::, 10.0.0.1:9000, :9000
_ADDRESS = re.compile(r"^\[?[0-9A-Fa-f:.]*[:.][0-9A-Fa-f:.]*\]?(:[0-9]+)?$|^:[0-9]+$")
# ports on a node that are taken: the node agent's (core.launch.AGENT_PORT, checked by a test)
RESERVED_PORTS = {8089: "the node agent's"}
# the local provider's stand-in for an image: the project's own emulator, the only program it runs
LOCAL_IMAGE = "bakeoff/emulator:local"
LOCAL_PROGRAM = ("-m", "bakeoff.serving.emulator")
LOCAL_ARGS = ("--host", "{host}", "--port", "{port}")  # in either order; the provider adds --config and --port-file


def slots(word: str) -> list[str]:
    """The placeholder names in one template word (``--tp={tensor_parallel}`` -> ``['tensor_parallel']``)."""
    return _SLOT.findall(word)


def fill(word: str, values: dict[str, str]) -> str:
    """One template word with its placeholders replaced in a single pass (a value is never read again)."""
    return _SLOT.sub(lambda m: values[m.group(1)], word)


def _no_code(words: list[str]) -> None:
    """No word starts a shell, and no interpreter gets inline code, wherever in the argv it stands."""
    for i, word in enumerate(words):
        base = word.rsplit("/", 1)[-1]
        if base in SHELLS:
            raise ValueError(
                f"[{i}]: {word!r} is a shell, which would read the rendered values as code again; start the "
                "server's own program (the template is run as argv, without a shell or a wrapper starting one)"
            )
        if not _INTERPRETER.match(base):
            continue
        for j in range(i + 1, len(words)):
            flag = words[j]
            if not flag.startswith("-") or flag == "-m":
                break
            if _CODE_FLAG.match(flag):
                raise ValueError(
                    f"[{j}]: {flag!r} hands {base} code on its command line; start a module or script the "
                    "image holds (e.g. python3 -m <module>)"
                )


def _listens_only_on_its_slots(words: list[str]) -> None:
    """Every listening flag takes {host}, {port} or {host}:{port} as its whole value, those slots appear
    nowhere else, and no word is a literal address: the stack can listen only where the front expects."""
    fix = 'give it {host} or {port} as its whole value (e.g. ["--host", "{host}", "--port", "{port}"])'
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        is_flag = name.startswith("-") and bool(_LISTEN_FLAG.match(name.lower().replace("_", "-")))
        if is_flag and eq and value not in _LISTEN_VALUES:
            raise ValueError(f"[{i}]: {word[:60]!r} sets where the stack listens; {fix}")
        if is_flag and not eq and (i + 1 >= len(words) or words[i + 1] not in _LISTEN_VALUES):
            raise ValueError(f"[{i}]: {word!r} sets where the stack listens; {fix}")
        if {"host", "port"} & set(slots(word)):
            whole = word in _LISTEN_VALUES and (
                i > 0 and bool(_LISTEN_FLAG.match(words[i - 1].lower().replace("_", "-")))
            )
            if not (whole or (is_flag and eq)):
                raise ValueError(
                    f"[{i}]: {word[:60]!r} uses {{host}} or {{port}} outside a listening flag's value; {fix}"
                )
        if _ADDRESS.match(value if eq else word) and not slots(word):
            raise ValueError(f"[{i}]: {word[:60]!r} is a literal address; the stack listens on {{host}}:{{port}} only")


class CustomStack(Strict):
    """``stack: custom`` with this block: the buyer's own serving stack, deployed like the built-in ones."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,39}$", description="what the report calls it: 'custom: <name>'")
    image: str = Field(description="container image (checked as the target's image is; pin it by digest for secrets)")
    command: list[str] = Field(
        min_length=1,
        max_length=64,
        description="argv template: the program, then its arguments; placeholders like {model}, {port}",
    )
    port: int = Field(8000, ge=1024, le=65534, description="the serving port the node opens (the stack: port+1)")
    health_route: str = Field(pattern=ROUTE_RE, description="answers 200 once the HTTP server is up")
    readiness_route: str = Field(
        "/v1/models", pattern=ROUTE_RE, description="an OpenAI model list that names the model once it is loaded"
    )
    metrics_prefix: str = Field(
        "", pattern=r"^(?:[a-zA-Z_][a-zA-Z0-9_]{0,39}:?)?$", description="its Prometheus names' prefix, e.g. vllm:"
    )
    metrics_route: str | None = Field(None, pattern=ROUTE_RE, description="its Prometheus text, if any")
    tokenize_route: str | None = Field(
        None, pattern=ROUTE_RE, description="POST {model, prompt} -> {count|tokens}, if it has one"
    )

    @field_validator("command")
    @classmethod
    def _template(cls, v: list[str]) -> list[str]:
        for i, word in enumerate(v):
            if not word or len(word) > 512 or any(ord(c) < 32 or ord(c) == 127 for c in word):
                raise ValueError(
                    f"[{i}]: {word[:40]!r} must be one plain word of 1-512 characters (no newline or control "
                    "character); give each argument as its own list item"
                )
            unknown = [s for s in slots(word) if s not in PLACEHOLDERS]
            if unknown or "{" in _SLOT.sub("", word) or "}" in _SLOT.sub("", word):
                raise ValueError(
                    f"[{i}]: {word[:60]!r} uses {('{' + unknown[0] + '}') if unknown else 'a stray brace'}; "
                    f"a template may name only {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
                )
        if sum(len(w) + 1 for w in v) > MAX_TEMPLATE:
            raise ValueError(
                f"{sum(len(w) + 1 for w in v)} characters, over {MAX_TEMPLATE}: the node's boot script must fit "
                "the clouds' 16 KB user-data; shorten it (a config file baked into the image can carry the rest)"
            )
        program = v[0]
        if slots(program) or not _PROGRAM.match(program):
            raise ValueError(f"[0]: {program[:60]!r} must name the program to start (a name or an absolute path)")
        _no_code(v)
        _listens_only_on_its_slots(v)
        named = {s for word in v for s in slots(word)}
        missing = [p for p in REQUIRED if p not in named]
        if missing:
            raise ValueError(
                f"the template never names {', '.join('{' + m + '}' for m in missing)}; the stack must listen "
                "on {host}:{port} (loopback behind the node's front, which holds the TLS and the API key), "
                'e.g. ["--host", "{host}", "--port", "{port}"]'
            )
        return v

    @field_validator("health_route", "readiness_route", "metrics_route", "tokenize_route")
    @classmethod
    def _plain_route(cls, v: str | None) -> str | None:
        if v is not None and any(part in (".", "..") for part in v.split("/")):
            raise ValueError(f"{v!r}: a route on the stack's own server, without . or .. segments (e.g. /health)")
        return v

    @field_validator("port")
    @classmethod
    def _free_port(cls, v: int) -> int:
        for p in (v, v + 1):
            if p in RESERVED_PORTS:
                raise ValueError(
                    f"{v}: port {p} is {RESERVED_PORTS[p]} (the stack listens on port+1 behind the front); pick another"
                )
        return v

    @model_validator(mode="before")
    @classmethod
    def _health_first(cls, data: object) -> object:
        """The one field a stack cannot do without is named with its fix, not as pydantic's 'Field required'."""
        if isinstance(data, dict) and not data.get("health_route"):
            raise ValueError(
                "health_route: required; name the route that answers 200 once the server is up (e.g. /health), "
                "so readiness can tell a starting server from a dead one"
            )
        return data

    @property
    def runs_locally(self) -> bool:
        """The template starts the project's emulator with only its address, as the local provider requires:
        it runs on the worker itself, where no other program or flag (a --port-file path) may be chosen."""
        pairs = sorted(zip(self.command[3::2], self.command[4::2], strict=False))
        return (
            self.image == LOCAL_IMAGE
            and self.command[0] in ("python", "python3")
            and tuple(self.command[1:3]) == LOCAL_PROGRAM
            and len(self.command) == 3 + len(LOCAL_ARGS)
            and pairs == sorted(zip(LOCAL_ARGS[::2], LOCAL_ARGS[1::2], strict=True))
        )
