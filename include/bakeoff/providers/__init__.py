"""Provider registry: a provider name from a plan -> a Provider instance.

Credentials are passed in by the caller (the DAG layer turns Airflow connections into them; the CLI
reads the environment), never looked up here.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from bakeoff.providers.base import CapacityError, Instance, Provider, ProviderError

__all__ = ["get_provider", "Instance", "Provider", "ProviderError", "CapacityError", "PROVIDERS"]

# name -> "module:Class", imported lazily so a DAG parse never imports boto3 or oci.
PROVIDERS: dict[str, str] = {
    "local": "bakeoff.providers.local:LocalProvider",
    "static": "bakeoff.providers.static:StaticProvider",
    "aws": "bakeoff.providers.aws:AwsProvider",
    "vultr": "bakeoff.providers.vultr:VultrProvider",
    "digitalocean": "bakeoff.providers.digitalocean:DigitalOceanProvider",
    "oci": "bakeoff.providers.oci:OciProvider",
}


def get_provider(name: str, credentials: dict[str, Any] | None = None, **options: Any) -> Provider:
    try:
        module, cls = PROVIDERS[name].split(":")
    except KeyError:
        raise ProviderError(f"provider {name!r} is not available; known: {', '.join(sorted(PROVIDERS))}") from None
    return getattr(import_module(module), cls)(credentials=credentials or {}, **options)
