"""Providers: a plan's provider name -> a Provider instance (``bakeoff.core.provider_facts`` says what each one is).

Credentials are passed in by the caller (the DAG layer turns Airflow connections into them; the CLI
reads the environment), never looked up here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from bakeoff.providers.base import CapacityError, Provider, ProviderError
from bakeoff.providers.registry import provider_class

__all__ = ["get_provider", "Provider", "ProviderError", "CapacityError"]


def get_provider(name: str, credentials: dict[str, Any] | None = None, **options: Any) -> Provider:
    """A provider instance for a plan's provider name, with the credentials the caller resolved; its
    class is imported here, so the registry stays free of every provider's dependencies."""
    cls = cast("Callable[..., Provider]", provider_class(name))  # every provider takes credentials=
    return cls(credentials=credentials or {}, **options)
