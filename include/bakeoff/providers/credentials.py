"""Provider credentials from the environment, for use without Airflow (the CLI, scripts).

In DAGs plugins/bakeoff_connections.py turns Airflow connections into the same dicts. A process that
is handed every provider's credentials at once (a test harness, a rehearsal against fake clouds)
gets them as JSON per provider in $BAKEOFF_CREDENTIALS, which wins when set.
"""

from __future__ import annotations

import json
import os
from typing import Any

from bakeoff.core.provider_facts import PROVIDERS

CREDENTIALS_ENV = "BAKEOFF_CREDENTIALS"


# The fields that make each form of credentials usable (registry.CredentialsForm); "none" needs none.
_REQUIRED = {"aws-keys": ("aws_access_key_id",), "api-token": ("token",), "oci-api-key": ("key_content", "key_file")}


def configured(form: str, creds: dict[str, Any]) -> bool:
    """Whether these credentials are configured at all (not whether they work): what the reaper checks
    before it lists a cloud, so an installation without that cloud is not an error on every pass.
    AWS also counts boto3's own chain (profile, instance role), which the empty dict leaves to boto3."""
    need = _REQUIRED.get(form)
    if need is None or any(creds.get(k) for k in need):
        return True
    if form == "aws-keys":
        import boto3  # noqa: PLC0415 - only the reaper's check of an AWS account with no keys given asks boto3

        return boto3.Session().get_credentials() is not None
    return False


def emulated_nodes(creds: dict[str, Any]) -> bool:
    """Whether the credentials claim every node boots the hardware emulator (the sandbox's clouds do):
    only the literal ``True`` counts, so a stray string or 1 in a real account's extra claims nothing.
    The claim lets a cluster target run; each node must still be one the launching layer records as
    emulator-backed (Provider.launched_emulated, cluster.check_emulated), never one that only says so itself."""
    return creds.get("emulated_nodes") is True


def json_credentials(provider: str) -> dict[str, Any]:
    """This provider's entry of $BAKEOFF_CREDENTIALS (empty when unset or absent)."""
    raw = os.environ.get(CREDENTIALS_ENV)
    return dict(json.loads(raw).get(provider, {})) if raw else {}


def credentials_from_env(provider: str) -> dict[str, Any]:
    """Its $BAKEOFF_CREDENTIALS entry, else each field the registry names an environment variable for
    (``env``) that is set; none for AWS, so boto3 uses its own chain (environment, profile, instance role)."""
    given = json_credentials(provider)
    if given:
        return given
    info = PROVIDERS.get(provider)
    env = info.env if info else {}
    return {field: os.environ[name] for field, name in env.items() if os.environ.get(name)}
