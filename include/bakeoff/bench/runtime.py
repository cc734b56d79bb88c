"""Run the benchmark's coroutines on uvloop (lower per-read overhead than the default loop)."""
from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Coroutine

import uvloop


def run_async(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine to completion on a fresh uvloop; from inside a running loop (a notebook,
    an async caller), run it on a separate thread so that loop is not blocked by a nested one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(run_async, coro).result()
