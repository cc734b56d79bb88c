"""The error every provider raises for what a person must act on, shared by every rank that calls one.

Here, not in ``providers``, so the registry (which the plan's checks import) and the launch spec raise it
without importing the provider interface, whose hooks take the plan's ``Target``.
"""

from __future__ import annotations


class ProviderError(RuntimeError):
    """A provider call failed in a way a person must act on; the message says what to do."""
