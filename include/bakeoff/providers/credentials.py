"""Provider credentials from the environment, for use without Airflow (the CLI, scripts).

In DAGs plugins/bakeoff_connections.py turns Airflow connections into the same dicts. A process that
is handed every provider's credentials at once (a test harness, a rehearsal against fake clouds)
gets them as JSON per provider in $BAKEOFF_CREDENTIALS, which wins when set.
"""

from __future__ import annotations

import json
import os
from typing import Any

CREDENTIALS_ENV = "BAKEOFF_CREDENTIALS"
TOKEN_ENV = {"vultr": "VULTR_API_KEY", "digitalocean": "DIGITALOCEAN_TOKEN"}
BASE_URL_ENV = {"vultr": "VULTR_API_URL", "digitalocean": "DIGITALOCEAN_API_URL"}
# OCI's API signing key, as the compose .env names it (the key itself is the PEM text)
OCI_ENV = {
    "user": "OCI_USER_OCID",
    "tenancy": "OCI_TENANCY_OCID",
    "fingerprint": "OCI_KEY_FINGERPRINT",
    "region": "OCI_REGION",
    "compartment_id": "OCI_COMPARTMENT_OCID",
    "key_content": "OCI_PRIVATE_KEY",
}


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
    given = json_credentials(provider)
    if given:
        return given
    if provider == "oci":
        return {k: os.environ[v] for k, v in OCI_ENV.items() if os.environ.get(v)}
    creds: dict[str, Any] = {}
    if os.environ.get(TOKEN_ENV.get(provider, "")):
        creds["token"] = os.environ[TOKEN_ENV[provider]]
    if os.environ.get(BASE_URL_ENV.get(provider, "")):
        creds["base_url"] = os.environ[BASE_URL_ENV[provider]]
    return creds  # aws: empty, so boto3 uses its own chain (environment, profile, instance role)
