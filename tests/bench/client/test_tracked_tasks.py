"""Every task the client and the load generator start is tracked: one that raises an unexpected
exception fails the point at once with that error, instead of leaving it waiting forever.

The unexpected exception is a real one: a host name with a label longer than 63 characters makes
the resolver's IDNA encoding raise UnicodeError, which is neither a timeout nor an OSError, so the
client has no record for it (before tasks were tracked, the closed loop's slot stayed busy and the
point never ended)."""

import asyncio

import pytest

from bakeoff.bench.client.prompts import RequestSpec
from bakeoff.bench.client.runtime import run_async
from bakeoff.bench.client.tasks import ClientTaskError, TaskSet
from bakeoff.bench.client.transport import StreamingClient
from bakeoff.bench.load.loadgen import PointId, Sender
from bakeoff.bench.load.point import measure
from bakeoff.plan import Workload

BAD_HOST = "http://" + "a" * 64 + ".invalid:8000"
GUARD_S = 10.0  # the point must end long before this; reaching it means it hung


def _sender(client: StreamingClient, n: int) -> Sender:
    w = Workload(name="tracked", input_len=4, output_len=4, concurrency=[2])
    spec = RequestSpec(4, 4, prompt="a b c d")
    return Sender(client, w, "m", PointId("r", "t", w.name, 2, 0), [spec] * n, 0, 5)


def _point(**load):
    async def go():
        client = StreamingClient(BAD_HOST, timeout_s=5)
        try:
            await asyncio.wait_for(measure(_sender(client, 6), warm=2, **load), GUARD_S)
        finally:
            await client.close()
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    return go


@pytest.mark.parametrize(
    "load", [{"concurrency": 2}, {"offsets": [0.0, 0.001, 0.002, 0.003, 0.004, 0.005]}], ids=["closed", "open"]
)
def test_an_unexpected_exception_in_a_send_task_fails_the_point_with_it(load):
    with pytest.raises(ClientTaskError, match=r"benchmark client task failed: UnicodeError") as info:
        run_async(_point(**load)())
    assert isinstance(info.value.__cause__, UnicodeError)  # the original error is kept for the traceback


def test_the_failed_point_leaves_no_task_running():
    async def go():
        with pytest.raises(ClientTaskError):
            await _point(concurrency=2)()
        await asyncio.sleep(0)
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    assert run_async(go()) == []


def test_a_task_set_holds_tasks_until_done_and_reports_the_first_error():
    seen = []

    async def ok():
        await asyncio.sleep(0)
        return 1

    async def boom(msg):
        raise ValueError(msg)

    async def go():
        tasks = TaskSet(on_error=seen.append)
        tasks.spawn(ok())
        tasks.spawn(boom("first"))
        held = len(tasks)
        await asyncio.sleep(0.01)
        tasks.spawn(boom("second"))
        await asyncio.sleep(0.01)
        slow = tasks.spawn(asyncio.sleep(10))
        tasks.cancel()
        await asyncio.wait([slow])
        await asyncio.sleep(0)  # its done-callback runs on the next loop iteration
        return held, len(tasks), tasks.error, slow.cancelled()

    held, left, error, cancelled = run_async(go())
    assert held == 2 and left == 0 and cancelled
    assert str(error) == "first" and [str(e) for e in seen] == ["first", "second"]  # a cancel is no error
