"""TTFT connection mode: warm (connections opened before measuring) vs per_request (a new connection
per request, set-up inside TTFT, as InferenceX and vLLM's benchmark open them)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bakeoff.bench.cli import AdhocTarget
from bakeoff.bench.client.transport import StreamingClient
from bakeoff.bench.run import run_workload
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import PlanError, Slo, Workload, plan_from_dict

SSE = (
    b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'
    b'data: {"choices":[{"index":0,"text":"b","finish_reason":"length"}],'
    b'"usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4}}\n\ndata: [DONE]\n\n'
)


class CountingServer:
    """A minimal HTTP/1.1 SSE server that counts the TCP connections it accepts and honours
    ``Connection: close``, on its own thread and loop."""

    def __init__(self):
        self.connections = 0
        self.close_headers = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").lower().split("\r\n")
                length = next((int(h.split(":", 1)[1]) for h in lines if h.startswith("content-length:")), 0)
                await reader.readexactly(length)
                close = "connection: close" in lines
                self.close_headers += close
                if lines[0].startswith("get "):
                    body, ctype = b'{"data":[{"id":"m"}]}', b"application/json"
                else:
                    body, ctype = SSE, b"text/event-stream"
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n%s"
                    % (ctype, len(body), b"connection: close\r\n" if close else b"", body)
                )
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    def __enter__(self) -> CountingServer:
        def run():
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
            self.port = self.server.sockets[0].getsockname()[1]
            self.ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _closed_loop(url: str, mode: str, n: int, concurrency: int, connect_delay_s: float = 0.0):
    """n requests through the closed loop; ``connect_delay_s`` stands for a slow TCP/TLS handshake."""

    async def go():
        client = StreamingClient(url, timeout_s=10, connection=mode)
        if connect_delay_s:
            real_open = client._open

            async def slow_open():
                await asyncio.sleep(connect_delay_s)
                return await real_open()

            client._open = slow_open
        try:
            await client.warm(concurrency)
            req = client.build("/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 2, "stream": True})
            return await client.closed_loop([req] * n, list(range(n)), concurrency)
        finally:
            await client.close()

    return asyncio.run(go())


@pytest.mark.parametrize("mode, expected", [("warm", 2), ("per_request", 10)])
def test_connections_opened_per_mode(mode, expected):
    with CountingServer() as srv:
        out = _closed_loop(srv.url, mode, n=10, concurrency=2)
        assert all(o.error is None for _, o in out) and len(out) == 10
        assert srv.connections == expected
        assert srv.close_headers == (10 if mode == "per_request" else 0)


def test_per_request_ttft_includes_connection_setup_and_warm_does_not():
    delay = 0.08
    with CountingServer() as srv:
        warm = [o.state.ttft for _, o in _closed_loop(srv.url, "warm", n=6, concurrency=2, connect_delay_s=delay)]
        fresh = [
            o.state.ttft for _, o in _closed_loop(srv.url, "per_request", n=6, concurrency=2, connect_delay_s=delay)
        ]
    assert max(warm) < delay <= min(fresh)


def test_single_stream_per_request_includes_setup():
    async def go(url):
        client = StreamingClient(url, timeout_s=10, connection="per_request")
        real_open = client._open

        async def slow_open():
            await asyncio.sleep(0.05)
            return await real_open()

        client._open = slow_open
        try:
            req = client.build("/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 2, "stream": True})
            return await client.stream(req)
        finally:
            await client.close()

    with CountingServer() as srv:
        out = asyncio.run(go(srv.url))
    assert out.error is None and out.state.ttft >= 0.05


def test_mode_is_a_workload_option_recorded_per_point(tmp_path):
    w = Workload(
        name="w",
        input_len=4,
        output_len=2,
        concurrency=[2],
        requests_per_point=6,
        warmup_requests=0,
        ttft_connection="per_request",
    )
    with CountingServer() as srv:
        ep = Endpoint(target="t", base_url=srv.url, model="m", stack="scripted", emulated=True)
        (point,) = run_workload(
            ep, AdhocTarget("t"), w, Slo(), tmp_path, "r", None, True, provenance=False, calibrate=False
        )
        assert srv.connections >= 6
    assert point["ttft_connection"] == "per_request" and point["completed"] == 6
    assert Workload(name="d").ttft_connection == "warm"


def test_bad_mode_names_the_field():
    with pytest.raises(ValueError, match="ttft_connection"):
        StreamingClient("http://127.0.0.1:1", connection="cold")
    from bakeoff.plan import load_plan

    raw = load_plan("local-demo").model_dump(mode="json")
    raw["workloads"][0]["ttft_connection"] = "cold"
    with pytest.raises(PlanError, match="ttft_connection"):
        plan_from_dict(raw)
