"""Per-run serving API keys, derived rather than stored, so no key ever travels through XCom.

Every key is HMAC-SHA256(installation secret, "<domain>/<message>") with one domain per kind of
key (``serving-key`` for a run's API keys, ``derive`` for keys and identities derived for one
purpose, ``fleet`` for a client fleet's message and channel keys): no domain name contains "/", so
no message of one kind can equal a message of another, whatever a run id or label holds. The
installation secret comes from $BAKEOFF_SECRET_KEY, else a 0600 file created once under the data root.

Secrets a plan may refer to (an existing endpoint's key, a serving token such as HF_TOKEN) are
named by connection id, restricted to a few prefixes, and resolved only when needed: from Airflow
connections in tasks, from BAKEOFF_CONN_<ID>_HOST / _PASSWORD environment variables in the CLI.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets as _secrets
from collections.abc import Callable, Mapping
from pathlib import Path

from bakeoff import durable
from bakeoff.paths import state_root

MIN_SECRET_BYTES = 32  # HMAC-SHA256 keys shorter than its output weaken every derived key
_MAKE_ONE = "python -c 'import secrets; print(secrets.token_hex(32))'"


def _installation_secret() -> bytes:
    env = os.environ.get("BAKEOFF_SECRET_KEY")
    if env is not None:
        if len(env.strip().encode()) < MIN_SECRET_BYTES:
            raise ValueError(
                f"BAKEOFF_SECRET_KEY: the installation secret must be at least {MIN_SECRET_BYTES} bytes "
                f"(it has {len(env.strip().encode())}); set it to the output of {_MAKE_ONE}, or unset "
                "it to use a generated secret.key under the data root"
            )
        return env.encode()
    path = state_root() / "secret.key"
    if not path.exists():
        _create_secret(path)
    secret = path.read_text().strip().encode()
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(
            f"secret.key: the installation secret at {path} must be at least {MIN_SECRET_BYTES} bytes "
            f"(it has {len(secret)}); write the output of {_MAKE_ONE} into it (mode 0600), or delete it "
            "to have one generated (keys of runs in flight change)"
        )
    return secret


def _create_secret(path: Path) -> None:
    """Write a new secret.key once; a reader that may not write (a read-only mount) is told what it lacks."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".secret.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise RuntimeError(
            f"secret.key: no installation secret at {path}, and this process cannot create one there "
            f"({exc.strerror}); a read-only reader (the compose file's bakeoff-clients) must see the "
            "installation's own state/secret.key, or set BAKEOFF_SECRET_KEY to the installation's secret. "
            "Docker Engine before 26 ignores a compose volume's subpath and mounts the whole volume instead "
            "(docs/production.md)"
        ) from exc
    with os.fdopen(fd, "w") as f:
        f.write(_secrets.token_hex(32))
        f.flush()
        os.fsync(f.fileno())  # never an empty secret.key after a crash
    try:
        os.link(tmp, path)  # atomic and exclusive: when two workers race, the first one wins
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    durable.fsync_path(path.parent, directory=True)


def holds_installation_secret(data: bytes) -> bool:
    """Whether ``data`` contains the installation secret (checked before a file leaves the installation)."""
    return _installation_secret() in data


_DOMAINS = ("serving-key", "derive", "fleet")


def _keyed(domain: str, message: str) -> bytes:
    """HMAC-SHA256 of ``message`` in ``domain`` (one of _DOMAINS) under the installation secret."""
    if domain not in _DOMAINS:
        raise ValueError(f"unknown key domain {domain!r}")
    return hmac.new(_installation_secret(), f"{domain}/{message}".encode(), hashlib.sha256).digest()


def api_key(run_id: str, target_slug: str) -> str:
    """The bearer token the target's server is started with and the client sends."""
    return "bk-" + _keyed("serving-key", f"{run_id}/{target_slug}").hex()[:40]


def derive(label: str) -> bytes:
    """32 bytes derived from the installation secret for one purpose (e.g. a node's TLS key), so
    nothing derived has to be stored or passed between tasks."""
    return _keyed("derive", label)


def fleet_key(label: str) -> bytes:
    """32 bytes for a client fleet (the broker message's MAC, a member's channel key): their own
    domain, so no serving key or derived key is ever one of them."""
    return _keyed("fleet", label)


def purpose_key(purpose: str) -> bytes:
    """A key for one purpose (signing approval records, ...), domain-separated from every other use of
    the installation secret: its message has no ``/``, which every api_key and derive message has, so no
    run id or target name a trigger chooses can make a serving key equal to it."""
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,63}", purpose):
        raise ValueError(f"purpose {purpose!r}: lower-case letters, digits and - only")
    return hmac.new(_installation_secret(), f"bakeoff-purpose\x00{purpose}".encode(), hashlib.sha256).digest()


INSTALLATION_ID_ENV = "BAKEOFF_INSTALLATION_ID"


def installation_id() -> str:
    """This installation's identity, tagged on every node it launches: derived from the installation
    secret (so another installation cannot guess it, and run ids, which repeat across installations
    on one schedule, never decide alone). $BAKEOFF_INSTALLATION_ID gives it to a process that must not
    hold the secret (the independent reaper: ``python -m bakeoff installation-id`` prints it)."""
    env = (os.environ.get(INSTALLATION_ID_ENV) or "").strip()
    return env or "bi-" + derive("installation-id").hex()[:24]


def known_installation_id() -> str | None:
    """The identity if this process can know it (the variable, or a secret here), else None: a reaper
    that cannot tell its own nodes judges none by its run, and creates no secret to find out."""
    if os.environ.get(INSTALLATION_ID_ENV) or os.environ.get("BAKEOFF_SECRET_KEY"):
        return installation_id()
    return installation_id() if (state_root() / "secret.key").exists() else None


# --- secrets a plan may name: only connections with these prefixes, never e.g. aws_default ---------
# A plan is untrusted input: it names a connection, the installation decides what that connection
# holds. The prefixes keep a plan from sending an arbitrary connection's password anywhere.
STATIC_CONN_PREFIX = "static_endpoint_"  # host = the endpoint's URL, password = its key
SECRET_CONN_PREFIXES = ("huggingface_", "registry_")  # password = a serving secret (HF or registry token)
SECRET_ENV_PREFIXES = ("HF_", "HUGGING_FACE_", "REGISTRY_")  # env names such a secret may be given on the node
CONN_ID_RE = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}"

ConnectionFn = Callable[[str], dict[str, str]]


class MissingSecret(LookupError):
    """A connection a plan names is not one it may name, is not defined here, or holds no value; the
    message says how to fix it."""


def env_var(conn_id: str, field: str) -> str:
    """Where the CLI (no Airflow) finds a connection's field: BAKEOFF_CONN_<ID>_<FIELD>, the id
    upper-cased with every other character as _ (static_endpoint_pool -> BAKEOFF_CONN_STATIC_ENDPOINT_POOL_HOST)."""
    return f"BAKEOFF_CONN_{re.sub(r'[^A-Z0-9]', '_', conn_id.upper())}_{field.upper()}"


def env_connection(conn_id: str) -> dict[str, str]:
    """The connection's host and password from the environment (the CLI's resolver)."""
    return {f: os.environ.get(env_var(conn_id, f), "") for f in ("host", "password")}


_resolve_connection: ConnectionFn = env_connection


def set_connection_resolver(fn: ConnectionFn) -> None:
    """The DAG layer installs an Airflow-connection lookup here (the library stays Airflow-free)."""
    global _resolve_connection
    _resolve_connection = fn


def allowed_connection(conn_id: str, prefixes: tuple[str, ...]) -> bool:
    return bool(re.fullmatch(CONN_ID_RE, conn_id)) and conn_id.startswith(prefixes)


def connection(conn_id: str, prefixes: tuple[str, ...]) -> dict[str, str]:
    """host and password of a connection a plan named; refuses any id outside ``prefixes`` (checked
    again here, not only when the plan is validated)."""
    if not allowed_connection(conn_id, prefixes):
        raise MissingSecret(
            f"connection {conn_id!r}: a plan may only name connections starting with "
            f"{' or '.join(prefixes)}; rename the connection and the plan's reference to it"
        )
    return dict(_resolve_connection(conn_id) or {})


def serving_secrets(target: str, declared: Mapping[str, str]) -> dict[str, str]:
    """A target's serving secrets (env name -> value) from the connections its plan names (``declared``:
    env name -> connection id), resolved when a step needs them (provision hands them to the provider,
    deploy to the node agent); never stored, logged or returned by a step."""
    out: dict[str, str] = {}
    for env, conn_id in declared.items():
        value = connection(conn_id, SECRET_CONN_PREFIXES).get("password") or ""
        if not value:
            raise MissingSecret(
                f"targets.{target}.secrets.{env}: connection {conn_id} is not defined or has no password; "
                "create it (Admin -> Connections, the token as password; "
                f"without Airflow set {env_var(conn_id, 'password')})"
            )
        out[env] = value
    return out
