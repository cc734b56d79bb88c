"""What the installation (not a plan) decides: which images may receive serving secrets, and whether a
plan may point a static target at an internal address.

Why here: a plan is untrusted input, so what it may reach is an installation setting, read from an
Airflow Variable in the DAG (passed into ``start_run`` as its raw value) or from the environment for
the CLI and tests. Both checks run at ``start_run``, before a run is recorded or anything is spent.
"""

from __future__ import annotations

import json
import os
import re
import socket
from typing import Any

import httpx

from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.plan import Plan, PlanError
from bakeoff.serving import egress
from bakeoff.serving.userdata import image_for

TRUSTED_IMAGES_VARIABLE = "bakeoff_trusted_images"
TRUSTED_IMAGES_ENV = "BAKEOFF_TRUSTED_IMAGES"
PRIVATE_ENDPOINTS_VARIABLE = "bakeoff_allow_private_endpoints"
PRIVATE_ENDPOINTS_ENV = "BAKEOFF_ALLOW_PRIVATE_ENDPOINTS"
DIGEST_PINNED = re.compile(r"^[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}$")
# names that reach a cloud's metadata service whatever they resolve to from here
_METADATA_HOSTS = {"metadata", "metadata.google.internal", "metadata.internal", "instance-data"}


def _raw(value: object, env: str) -> Any:
    if value is None or (isinstance(value, str) and not value.strip()):
        return os.environ.get(env) or None
    return value


def trusted_images(value: object = None) -> frozenset[str]:
    """The images that may receive serving secrets: the Variable's raw value (a JSON list, or names
    separated by commas, spaces or lines), else $BAKEOFF_TRUSTED_IMAGES; each pinned by digest."""
    raw = _raw(value, TRUSTED_IMAGES_ENV)
    if raw is None:
        return frozenset()
    if isinstance(raw, str):
        text = raw.strip()
        try:
            raw = json.loads(text) if text.startswith("[") else re.split(r"[\s,]+", text)
        except ValueError:
            raw = None
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise PlanError(
            f"{TRUSTED_IMAGES_VARIABLE}: expected a list of images pinned by digest (a JSON list, or one per "
            f"line); set the Airflow Variable (or {TRUSTED_IMAGES_ENV}) or delete it"
        )
    images = [x.strip() for x in raw if x.strip()]
    for image in images:
        if not DIGEST_PINNED.match(image):
            raise PlanError(
                f"{TRUSTED_IMAGES_VARIABLE}: {image[:120]!r} is not pinned by digest; write it as "
                "name:tag@sha256:<64 hex> (python -m bakeoff images pin name:tag prints it)"
            )
    return frozenset(images)


def check_secret_images(plan: Plan, trusted: frozenset[str]) -> None:
    """A target with serving secrets must run an image the installation trusts, pinned by digest: a
    floating tag (every vendored recipe's, and the catalog's) can be re-pushed with other code."""

    for i, t in enumerate(plan.targets):
        if not t.secrets:
            continue
        image = image_for(t)
        if not DIGEST_PINNED.match(image):
            why = f"{image!r} is a floating tag (no @sha256: digest), and floating images get no secrets"
        elif image not in trusted:
            why = f"{image!r} is not one of the images the installation trusts with secrets"
        else:
            continue
        raise PlanError(
            f"targets[{i}].image: {why}; the target asks for secrets ({', '.join(sorted(t.secrets))}). Pin the "
            f"image by digest and have the installation add it to the Airflow Variable {TRUSTED_IMAGES_VARIABLE} "
            f"(or {TRUSTED_IMAGES_ENV}): python -m bakeoff images pin {image.split('@')[0]} prints both, "
            "or drop the secrets"
        )


def private_endpoints_allowed(value: object = None) -> bool:
    """Whether a static ``base_url`` may name loopback, link-local or private addresses (the Variable's
    raw value, else $BAKEOFF_ALLOW_PRIVATE_ENDPOINTS; default no)."""
    raw = _raw(value, PRIVATE_ENDPOINTS_ENV)
    if raw is None or isinstance(raw, bool):
        return bool(raw)
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes"):
        return True
    if text in ("0", "false", "no"):
        return False
    raise PlanError(
        f"{PRIVATE_ENDPOINTS_VARIABLE}: {text[:40]!r} is not true or false; set the Airflow Variable "
        f"(or {PRIVATE_ENDPOINTS_ENV}) to true or false, or delete it (false)"
    )


def internal_host(host: str) -> str | None:
    """Why ``host`` is internal (the address it resolves to), or None for a public one."""

    name = host.strip("[]").rstrip(".").lower()
    if name in _METADATA_HOSTS or name.endswith(".internal") or name == "localhost" or name.endswith(".localhost"):
        return f"{host} is an internal name"
    try:
        addrs = {str(a[4][0]) for a in egress.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)}
    except (socket.gaierror, UnicodeError):
        return f"{host} does not resolve"
    bad = sorted(a for a in addrs if egress.internal_address(a))
    return f"{host} resolves to {bad[0]}, an internal address" if bad else None


def guarded_hosts(plan: Plan, allowed: bool) -> list[str]:
    """The plan-chosen static base_url hosts that every connection checks again (serving/egress.py):
    none when the installation allows private endpoints."""
    if allowed:
        return []

    urls = [t.provider_options.get("base_url") for t in plan.targets if PROVIDERS[t.provider].existing_endpoint]
    return sorted({httpx.URL(u).host for u in urls if u} - {""})


def check_static_endpoints(plan: Plan, allowed: bool) -> None:
    """A static ``base_url`` chosen by the plan must be a public address unless the installation allows
    private ones: the worker fetches /version, /v1/models and /metrics from it and reports the answers.
    ``endpoint_connection`` (the installation's own connection) stays the way to name a private endpoint."""
    if allowed:
        return

    for i, t in enumerate(plan.targets):
        url = t.provider_options.get("base_url") if PROVIDERS[t.provider].existing_endpoint else None
        if not url:
            continue
        why = internal_host(httpx.URL(url).host or "")
        if why:
            raise PlanError(
                f"targets[{i}].provider_options.base_url: {why}, and a plan may not send the worker's "
                "requests inside its network; name an installation connection instead "
                f"(provider_options.endpoint_connection: static_endpoint_<name>), or have the installation "
                f"set the Airflow Variable {PRIVATE_ENDPOINTS_VARIABLE} (or {PRIVATE_ENDPOINTS_ENV}) to true"
            )
