"""The benchmark's HTTP/1.1 streaming transport: an asyncio protocol with httptools' parser.

Why not httpx or aiohttp here: measured by benchmarks/client_fidelity.py, their per-chunk cost
(a coroutine wake-up and buffer copies per read) turned into tens of milliseconds of TTFT error at
high concurrency on one core. Here every read is timestamped in ``data_received`` — the first
Python code that runs after the socket read — and fed straight to the parser; there is no task
switch per chunk. Connections are opened and kept alive before measuring, so connection set-up is
never inside a TTFT. httpx remains the project's client for control-plane calls.
"""
from __future__ import annotations

import asyncio
import json
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

from bakeoff.bench.sse import StreamError, StreamState

_now = time.perf_counter


@dataclass
class Outcome:
    """What one streamed request produced; times are perf_counter seconds."""

    t_send: float
    wall_send: float
    t_end: float
    status: int | None
    state: StreamState
    error: StreamError | None


class _Job:
    """Parser callbacks for one response on one connection."""

    __slots__ = ("conn", "state", "fut", "parser", "status", "keep_alive", "errbody", "now", "got_bytes")

    def __init__(self, conn: "_Conn", state: StreamState, fut: asyncio.Future):
        self.conn, self.state, self.fut = conn, state, fut
        self.parser = httptools.HttpResponseParser(self)
        self.status: int | None = None
        self.keep_alive = True
        self.errbody = b""
        self.now = 0.0
        self.got_bytes = False

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        if self.status == 200:
            self.state.feed(body, self.now)
        elif len(self.errbody) < 2048:
            self.errbody += body

    def on_message_complete(self) -> None:
        self.finish(None, self.now)

    def finish(self, err: StreamError | None, now: float) -> None:
        if not self.fut.done():
            self.fut.set_result((err, now))


class _Conn(asyncio.Protocol):
    __slots__ = ("transport", "job", "alive")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.job: _Job | None = None
        self.alive = True

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = _now()
        job = self.job
        if job is None:                      # bytes nobody asked for: never reuse this connection
            self.alive = False
            self.transport.close()
            return
        job.now = now
        job.got_bytes = True
        try:
            job.parser.feed_data(data)
        except httptools.HttpParserError as e:
            job.finish(StreamError("malformed_http", f"unparseable HTTP response: {e}"), now)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        job = self.job
        if job is not None:
            kind = "connection_reset" if exc else "truncated"
            detail = f"connection lost: {type(exc).__name__}: {exc}" if exc else "server closed the connection mid-response"
            job.finish(StreamError(kind, detail), _now())


class StreamingClient:
    """Keep-alive connections to one server; ``stream`` sends a pre-built request and accounts it."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 300.0):
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"endpoint: {base_url!r} is not an http(s) URL; give e.g. http://127.0.0.1:8000")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if u.scheme == "https" else None
        self.prefix = u.path.rstrip("/")
        if self.prefix.endswith("/v1"):
            self.prefix = self.prefix[:-3]
        self.hostport = u.netloc
        self._auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self.timeout_s = timeout_s
        self._idle: list[_Conn] = []
        self._all: set[_Conn] = set()

    def __repr__(self) -> str:                      # never shows the key
        return f"StreamingClient({self.host}:{self.port})"

    def build(self, path: str, body: dict) -> bytes:
        payload = json.dumps(body, separators=(",", ":")).encode()
        head = (f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.hostport}\r\nUser-Agent: bakeoff-bench\r\n"
                f"Accept: text/event-stream\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n{self._auth}\r\n")
        return head.encode() + payload

    async def _open(self) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Conn, self.host, self.port, ssl=self.ssl,
                                               server_hostname=self.host if self.ssl else None)
        self._all.add(conn)
        return conn

    async def warm(self, n: int) -> int:
        """Open connections up to n idle ones before measuring; returns how many are open."""
        need = n - len(self._idle)
        if need > 0:
            got = await asyncio.gather(*(self._open() for _ in range(need)), return_exceptions=True)
            self._idle.extend(c for c in got if isinstance(c, _Conn))
        return len(self._idle)

    def _take(self) -> _Conn | None:
        while self._idle:
            c = self._idle.pop()
            if c.alive and not c.transport.is_closing():
                return c
            self._all.discard(c)
        return None

    async def stream(self, request: bytes, timeout_s: float | None = None) -> Outcome:
        """Send one request; never raises for server or network misbehaviour."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout_s or self.timeout_s)
        for attempt in (0, 1):
            conn, reused = self._take(), True
            if conn is None:
                reused = False
                try:
                    conn = await asyncio.wait_for(self._open(), max(0.001, deadline - loop.time()))
                except asyncio.TimeoutError:
                    t = _now()
                    return Outcome(t, time.time(), t, None, StreamState(t), StreamError("timeout", "connect timed out"))
                except OSError as e:
                    t = _now()
                    return Outcome(t, time.time(), t, None, StreamState(t),
                                   StreamError("connect_error", f"{type(e).__name__}: {e}"))
            out, retry = await self._once(conn, request, deadline, loop)
            if not (retry and reused and attempt == 0):
                return out
        return out  # pragma: no cover

    async def _once(self, conn: _Conn, request: bytes, deadline: float, loop) -> tuple[Outcome, bool]:
        fut = loop.create_future()
        wall = time.time()
        t_send = _now()
        state = StreamState(t_send)
        job = conn.job = _Job(conn, state, fut)
        handle = loop.call_at(deadline, job.finish, StreamError("timeout", "request timed out"), 0.0)
        conn.transport.write(request)
        try:
            err, t_end = await fut
        finally:
            handle.cancel()
            conn.job = None
        if err is not None and err.kind == "timeout":
            t_end = _now()
        # a kept-alive connection the server had already closed: nothing received, safe to resend once
        retry = err is not None and not job.got_bytes and err.kind in ("connection_reset", "truncated")
        if err is None:
            if job.status != 200:
                err = StreamError(f"http_{job.status // 100}xx",
                                  f"HTTP {job.status}: {job.errbody[:300].decode('utf-8', 'replace')}")
            else:
                err = state.verdict()
        if err is None and job.keep_alive and conn.alive:
            self._idle.append(conn)
        else:
            conn.alive = False
            conn.transport.close()
            self._all.discard(conn)
        return Outcome(t_send, wall, t_end, job.status, state, err), retry

    async def close(self) -> None:
        for c in list(self._all):
            if c.transport is not None:
                c.transport.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)
