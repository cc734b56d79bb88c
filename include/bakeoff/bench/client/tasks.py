"""Background tasks the benchmark client starts, held until they end.

An ``asyncio.create_task`` nobody holds can be garbage-collected mid-flight, and an exception in it
is only logged when the task is freed: a connect that raised inside a closed loop left its slot
busy forever and the point never ended. Every task the client and the load generator start goes
through a ``TaskSet``: held in a set, removed by a done-callback that hands an unexpected exception
to ``on_error``, so the waiting point fails at once with that error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


class ClientTaskError(RuntimeError):
    """A task of the benchmark client raised: the point cannot be trusted and stops here."""


class TaskSet:
    """Tasks held until done; the first unexpected exception is kept (``error``) and passed to ``on_error``."""

    def __init__(self, on_error: Callable[[BaseException], None] | None = None):
        self._tasks: set[asyncio.Task[Any]] = set()
        self._on_error = on_error
        self.error: BaseException | None = None

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        if self.error is None:
            self.error = exc
        if self._on_error is not None:
            self._on_error(exc)

    def __len__(self) -> int:
        return len(self._tasks)

    def cancel(self) -> None:
        """Cancel whatever is still running (a failed or abandoned point leaves nothing behind)."""
        for task in list(self._tasks):
            task.cancel()


def task_failure(exc: BaseException) -> ClientTaskError:
    """The error a point fails with when one of its tasks raised ``exc``."""
    err = ClientTaskError(f"benchmark client task failed: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err
