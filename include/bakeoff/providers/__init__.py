"""Providers: a plan's provider name -> a Provider instance (see registry.py for what each one is).

Credentials are passed in by the caller (the DAG layer turns Airflow connections into them; the CLI
reads the environment), never looked up here.
"""

from __future__ import annotations

from bakeoff.providers.base import CapacityError, Instance, Provider, ProviderError
from bakeoff.providers.registry import PROVIDERS, ProviderInfo, get_provider, provider_info

__all__ = [
    "get_provider",
    "provider_info",
    "Instance",
    "Provider",
    "ProviderError",
    "CapacityError",
    "PROVIDERS",
    "ProviderInfo",
]
