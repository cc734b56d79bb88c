"""Fixtures for the emulator tests."""

from __future__ import annotations

import asyncio

import pytest


@pytest.fixture
def run():
    """Run a coroutine to completion (the suite has no asyncio plugin)."""
    return lambda coro: asyncio.run(asyncio.wait_for(coro, 30))
