"""The provider registry's plug-in pieces, imported when asked.

An entry's facts are data in ``bakeoff.core.provider_facts`` (the plan reads them below the
providers); its class, pre-flight and boot-script sections are ``module:name`` pointers, which only
this module turns into code, so reading an entry never imports a provider or its SDK.
"""

from __future__ import annotations

from importlib import import_module

from bakeoff.core.provider_facts import provider_info


def resolve(ref: str) -> object:
    """What a ``module:name`` pointer of an entry names, imported now (the facts themselves stay cheap)."""
    module, name = ref.split(":")
    found: object = getattr(import_module(module), name)
    return found


def provider_class(name: str) -> type[object]:
    """The named provider's class, imported now (``bakeoff.providers.get_provider`` makes the instance)."""
    ref = provider_info(name).cls
    loaded = resolve(ref)
    assert isinstance(loaded, type), ref
    return loaded
