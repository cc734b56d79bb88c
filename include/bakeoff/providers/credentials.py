"""Provider credentials from the environment, for use without Airflow (the CLI, scripts).

In DAGs the hooks in plugins/ turn Airflow connections into the same dicts. A sandbox started with
``python -m bakeoff.sandbox`` publishes its fake clouds' credentials as JSON in $BAKEOFF_SANDBOX,
which wins when set.
"""

from __future__ import annotations

import json
import os
from typing import Any

SANDBOX_ENV = "BAKEOFF_SANDBOX"
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


def sandbox_credentials(provider: str) -> dict[str, Any]:
    raw = os.environ.get(SANDBOX_ENV)
    return dict(json.loads(raw).get(provider, {})) if raw else {}


def credentials_from_env(provider: str) -> dict[str, Any]:
    sandbox = sandbox_credentials(provider)
    if sandbox:
        return sandbox
    if provider == "oci":
        return {k: os.environ[v] for k, v in OCI_ENV.items() if os.environ.get(v)}
    creds: dict[str, Any] = {}
    if os.environ.get(TOKEN_ENV.get(provider, "")):
        creds["token"] = os.environ[TOKEN_ENV[provider]]
    if os.environ.get(BASE_URL_ENV.get(provider, "")):
        creds["base_url"] = os.environ[BASE_URL_ENV[provider]]
    return creds  # aws: empty, so boto3 uses its own chain (environment, profile, instance role)
