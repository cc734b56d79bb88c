"""Run the benchmark's coroutines on uvloop (lower per-read overhead than the default loop), and
keep the cyclic garbage collector out of a point."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import uvloop

_T = TypeVar("_T")


def run_async(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to completion on a fresh uvloop; from inside a running loop (a notebook,
    an async caller), run it on a separate thread so that loop is not blocked by a nested one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(lambda: run_async(coro)).result()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a point runs.

    A full collection walks every live object -- at 1,000 requests/s that is tens of thousands of
    request states -- and blocked the event loop for 40-130 ms at a time, so open-loop sends left
    late in bursts. The client's hot path makes no reference cycles (objects are freed by reference
    counting), so memory stays bounded; what exists before the point is frozen out of later
    collections (freezing is cheap; a collection here would itself be a stall after the point's
    clock started), and collection resumes when the point ends. Nested use is a no-op.
    """
    if not gc.isenabled():
        yield
        return
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()
