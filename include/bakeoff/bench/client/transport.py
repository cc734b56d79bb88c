"""The benchmark's HTTP/1.1 streaming transport: raw sockets, httptools' parser, kernel timestamps.

Why not httpx or aiohttp on the hot path (measured by benchmarks/client_fidelity.py): a timestamp
taken in Python when a read is processed includes every callback queued ahead of it, so on a busy
core TTFT grows with concurrency. Here each read is a ``recvmsg`` whose SO_TIMESTAMPNS ancillary
data says when the kernel received the bytes; the event loop's queueing drops out of the figure as
long as the client keeps up on average (the loop monitor, bench.client.monitor, checks that). Per read there is no task
switch: the parser callbacks feed the SSE accounting directly. TLS endpoints use an asyncio
protocol instead (stamped on arrival in Python). httpx remains the project's client for
control-plane calls.

Connection mode (the workload's ``ttft_connection``): ``warm`` (default) opens keep-alive
connections before measuring, so connection set-up is never inside a TTFT -- the server's own
latency; ``per_request`` opens a fresh connection for every request (``Connection: close``) and
starts its clock before the connect, so TTFT includes TCP (and TLS) set-up, as InferenceX and
vLLM's benchmark clients measure it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import httptools

from bakeoff.bench.client.sse import StreamError, StreamState
from bakeoff.bench.client.tasks import TaskSet, task_failure
from bakeoff.core.pinning import client_context
from bakeoff.serving import egress

_now = time.perf_counter
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux value; absent elsewhere
_TS = struct.Struct("qq")  # struct timespec
_ANC = socket.CMSG_SPACE(_TS.size)
_BUF = 1 << 18
CONNECTION_MODES = ("warm", "per_request")


@dataclass
class Outcome:
    """What one streamed request produced; times are perf_counter seconds."""

    t_send: float
    wall_send: float
    t_end: float
    status: int | None
    state: StreamState
    error: StreamError | None


_T = TypeVar("_T")


def _settle(fut: asyncio.Future[tuple[Outcome, bool]], out: Outcome, retry: bool) -> None:
    """A request's outcome onto the future its sender awaits (the first one wins)."""
    if not fut.done():
        fut.set_result((out, retry))


class _Job:
    """Parser callbacks for one response on one connection."""

    __slots__ = ("conn", "state", "done", "parser", "status", "keep_alive", "errbody", "now", "got_bytes", "over")

    def __init__(self, conn: _Conn, state: StreamState, done: Callable[[StreamError | None, float], None]):
        self.conn, self.state = conn, state
        self.done: Callable[[StreamError | None, float], None] | None = done
        self.over = False
        self.parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self.status: int | None = None
        self.keep_alive = True
        self.errbody = b""
        self.now = 0.0
        self.got_bytes = False

    def on_headers_complete(self) -> None:
        if self.parser is None:  # bytes after this response ended: ignored
            return
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
        if not self.over:
            self.over = True
            done, self.done = self.done, None
            try:
                if done is not None:
                    done(err, now)
            finally:
                # job <-> parser and job <-> done closure are reference cycles: broken here, a
                # finished request is freed by reference counting instead of waiting for the
                # cyclic collector, whose full passes over a point's objects stall the event loop
                self.parser = None


class _Conn:
    """One keep-alive connection; subclasses deliver reads to ``feed`` with their arrival time."""

    job: _Job | None = None
    alive = True

    def feed(self, data: bytes, now: float) -> None:
        job = self.job
        if job is None or job.parser is None:  # bytes nobody asked for: never reuse this connection
            self.alive = False
            self.close()
            return
        job.now = now
        job.got_bytes = True
        try:
            job.parser.feed_data(data)
        except httptools.HttpParserError as e:
            job.finish(StreamError("malformed_http", f"unparseable HTTP response: {e}"), now)

    def lost(self, exc: BaseException | None) -> None:
        self.alive = False
        job = self.job
        if job is not None:
            kind = "connection_reset" if exc else "truncated"
            detail = (
                f"connection lost: {type(exc).__name__}: {exc}" if exc else "server closed the connection mid-response"
            )
            job.finish(StreamError(kind, detail), _now())

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def closing(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _SocketConn(_Conn):
    """Plain TCP read with recvmsg and kernel receive timestamps (SO_TIMESTAMPNS).

    The timestamp is when the kernel received the bytes, not when this process got round to
    reading them, so a busy event loop cannot inflate TTFT or ITL; it is mapped onto the
    perf_counter clock with the offset sampled at each send.
    """

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, tasks: TaskSet):
        self.sock, self.loop, self.tasks = sock, loop, tasks
        self.fd = sock.fileno()
        self.offset = time.time() - _now()
        loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        try:
            data, anc, _, _ = self.sock.recvmsg(_BUF, _ANC)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.close()
            self.lost(e)
            return
        if not data:
            self.close()
            self.lost(None)
            return
        if anc:
            sec, ns = _TS.unpack_from(anc[0][2])
            now = sec + ns * 1e-9 - self.offset
        else:
            now = _now()
        self.feed(data, now)

    def write(self, data: bytes) -> None:
        self.offset = time.time() - _now()
        n = self.sock.send(data)
        if n < len(data):
            self.tasks.spawn(self._send_rest(data[n:]))

    async def _send_rest(self, data: bytes) -> None:
        """The rest of a request the socket buffer could not take at once."""
        try:
            await self.loop.sock_sendall(self.sock, data)
        except OSError as e:
            self.close()
            self.lost(e)

    def closing(self) -> bool:
        return not self.alive

    def close(self) -> None:
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            self.fd = -1
            self.sock.close()
        self.alive = False


class _ProtocolConn(_Conn, asyncio.Protocol):
    """TLS connections: an asyncio protocol, timestamped when data_received runs."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection's transport

    def data_received(self, data: bytes) -> None:
        self.feed(data, _now())

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost(exc)

    def write(self, data: bytes) -> None:
        if self.transport is None:  # create_connection returns only after connection_made
            raise ConnectionError("write before the connection was made")
        self.transport.write(data)

    def closing(self) -> bool:
        return not self.alive or self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        self.alive = False
        if self.transport is not None:
            self.transport.close()


class StreamingClient:
    """Keep-alive connections to one server; ``stream`` sends a pre-built request and accounts it."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        tls_cert: str | None = None,
        connection: str = "warm",
    ):
        """``tls_cert``: the node's own certificate (PEM); an https server is then trusted only if it
        holds that certificate's key (serving/tls.py), else by the system's CAs. ``connection``:
        warm or per_request (see the module docstring)."""
        if connection not in CONNECTION_MODES:
            raise ValueError(
                f"ttft_connection: {connection!r} is not a connection mode; use warm (connections "
                "opened before measuring) or per_request (a new connection per request, as InferenceX)"
            )
        self.per_request = connection == "per_request"
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"endpoint: {base_url!r} is not an http(s) URL; give e.g. http://127.0.0.1:8000")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        verify = client_context(base_url, tls_cert)  # the pinned context, or True: the system's CAs
        if isinstance(verify, ssl.SSLContext):
            self.ssl: ssl.SSLContext | None = verify
        else:
            self.ssl = ssl.create_default_context() if u.scheme == "https" else None
        self.prefix = u.path.rstrip("/")
        if self.prefix.endswith("/v1"):
            self.prefix = self.prefix[:-3]
        self.hostport = u.netloc
        self._auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._close = "Connection: close\r\n" if self.per_request else ""
        self.timeout_s = timeout_s
        self._idle: list[_Conn] = []
        self._all: set[_Conn] = set()
        self._addr: tuple[int, tuple[Any, ...]] | None = None  # (family, sockaddr) of the server, once resolved
        # connects and partial writes run as tasks; one that raises fails every caller waiting on
        # this client (tasks.TaskSet) instead of leaving a request or a closed-loop slot pending
        self._tasks = TaskSet(on_error=self._task_failed)
        self._waiters: set[asyncio.Future[Any]] = set()

    def __repr__(self) -> str:  # never shows the key
        return f"StreamingClient({self.host}:{self.port})"

    def _task_failed(self, exc: BaseException) -> None:
        err = task_failure(exc)
        for fut in list(self._waiters):
            if not fut.done():
                fut.set_exception(err)

    async def _wait(self, fut: asyncio.Future[_T]) -> _T:
        """Await ``fut``, or raise ClientTaskError as soon as one of this client's tasks fails."""
        if self._tasks.error is not None:
            raise task_failure(self._tasks.error)
        self._waiters.add(fut)
        try:
            return await fut
        finally:
            self._waiters.discard(fut)

    def build(self, path: str, body: dict[str, Any]) -> bytes:
        payload = json.dumps(body, separators=(",", ":")).encode()
        head = (
            f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.hostport}\r\nUser-Agent: bakeoff-bench\r\n"
            f"Accept: text/event-stream\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n{self._close}{self._auth}\r\n"
        )
        return head.encode() + payload

    async def _open(self) -> _Conn:
        loop = asyncio.get_running_loop()
        conn: _Conn
        if self._addr is None:  # resolved once (a lookup per connection runs on a thread pool) and checked
            # when the host is a guarded plan-chosen one: every connection goes to that address (egress.py)
            self._addr = await loop.run_in_executor(None, egress.checked_address, self.host, self.port)
        family, addr = self._addr
        if self.ssl is not None:
            _, conn = await loop.create_connection(
                _ProtocolConn, addr[0], addr[1], ssl=self.ssl, server_hostname=self.host
            )
        else:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                except OSError:
                    pass  # no kernel timestamps: reads are stamped on arrival
                await loop.sock_connect(sock, addr)
            except BaseException:
                sock.close()
                raise
            conn = _SocketConn(sock, loop, self._tasks)
        self._all.add(conn)
        return conn

    async def warm(self, n: int) -> int:
        """Open connections up to n idle ones before measuring; returns how many are open (none
        in per_request mode: each request opens its own, inside its TTFT)."""
        if self.per_request:
            return 0
        need = n - len(self._idle)
        if need > 0:
            got = await asyncio.gather(*(self._open() for _ in range(need)), return_exceptions=True)
            self._idle.extend(c for c in got if isinstance(c, _Conn))
        return len(self._idle)

    def _take(self) -> _Conn | None:
        if self.per_request:
            return None
        while self._idle:
            c = self._idle.pop()
            if not c.closing():
                return c
            self._all.discard(c)
        return None

    def _launch(
        self,
        conn: _Conn,
        request: bytes,
        timeout: float,
        reused: bool,
        on_done: Callable[[Outcome, bool], object],
        started: tuple[float, float] | None = None,
    ) -> None:
        """Write one request on conn; ``on_done(outcome, retryable)`` runs in the read callback that
        completes it, so a caller can send its next request without a task switch in between.
        ``started`` (perf_counter, wall clock): when the request's clock started, if before now
        (per_request mode: before its connection was opened)."""
        loop = asyncio.get_running_loop()
        t_send, wall = started or (_now(), time.time())
        state = StreamState(t_send)

        def done(err: StreamError | None, t_end: float) -> None:
            handle.cancel()
            conn.job = None
            if err is not None and err.kind == "timeout":
                t_end = _now()
            # a kept-alive connection the server had already closed: nothing received, safe to resend
            retry = reused and err is not None and not job.got_bytes and err.kind in ("connection_reset", "truncated")
            if err is None:
                if job.status != 200:
                    err = StreamError(
                        f"http_{job.status // 100}xx" if job.status is not None else "malformed_http",
                        f"HTTP {job.status}: {job.errbody[:300].decode('utf-8', 'replace')}",
                    )
                else:
                    err = state.verdict()
            if err is None and job.keep_alive and conn.alive and not self.per_request:
                self._idle.append(conn)
            else:
                conn.close()
                self._all.discard(conn)
            on_done(Outcome(t_send, wall, t_end, job.status, state, err), retry)

        job = conn.job = _Job(conn, state, done)
        handle = loop.call_at(loop.time() + timeout, job.finish, StreamError("timeout", "request timed out"), 0.0)
        try:
            conn.write(request)
        except OSError as e:
            job.finish(StreamError("connection_reset", f"send failed: {type(e).__name__}: {e}"), _now())

    def _clock(self) -> tuple[float, float] | None:
        """The request's start before its connect, in per_request mode only (warm mode keeps set-up
        of a spare connection out of TTFT)."""
        return (_now(), time.time()) if self.per_request else None

    async def _connect(self, timeout: float) -> _Conn | Outcome:
        """A fresh connection, or the failed Outcome to record when there is none."""
        try:
            return await asyncio.wait_for(self._open(), max(0.001, timeout))
        except TimeoutError:
            err = StreamError("timeout", "connect timed out")
        except OSError as e:
            err = StreamError("connect_error", f"{type(e).__name__}: {e}")
        t = _now()
        return Outcome(t, time.time(), t, None, StreamState(t), err)

    async def stream(self, request: bytes, timeout_s: float | None = None) -> Outcome:
        """Send one request; never raises for server or network misbehaviour."""
        loop = asyncio.get_running_loop()
        timeout = timeout_s or self.timeout_s
        deadline = loop.time() + timeout
        conn: _Conn | Outcome | None
        for attempt in (0, 1):
            conn, reused, started = self._take(), True, None
            if conn is None:
                reused = False
                started = self._clock()
                conn = await self._connect(deadline - loop.time())
                if isinstance(conn, Outcome):
                    return conn
            fut: asyncio.Future[tuple[Outcome, bool]] = loop.create_future()
            self._launch(
                conn,
                request,
                max(0.001, deadline - loop.time()),
                reused,
                functools.partial(_settle, fut),
                started,
            )
            out, retry = await self._wait(fut)
            if not (retry and attempt == 0):
                return out
        return out  # pragma: no cover

    async def closed_loop(
        self,
        requests: list[bytes],
        order: Iterable[int],
        concurrency: int,
        *,
        timeout_s: float | None = None,
        stop_at: float | None = None,
        warmup: int = 0,
    ) -> list[tuple[int, Outcome]]:
        """Closed-loop load: ``concurrency`` slots each send their next request (next in ``order``)
        the moment the previous response ends, from inside the read callback, so the gap between
        a response and the next request carries no task scheduling. ``stop_at`` (perf_counter)
        stops new measured (index >= warmup) sends. Returns (index, outcome) in completion order."""
        loop = asyncio.get_running_loop()
        timeout = timeout_s or self.timeout_s
        todo = iter(order)
        results: list[tuple[int, Outcome]] = []
        busy = [0]  # requests in flight or connecting
        finished: asyncio.Future[None] = loop.create_future()

        def take() -> int | None:
            if finished.done():  # the point failed: no new sends
                return None
            for i in todo:
                if stop_at is not None and i >= warmup and _now() > stop_at:
                    return None
                return i
            return None

        def settle() -> None:
            if busy[0] == 0 and not finished.done():
                finished.set_result(None)

        def start(i: int | None) -> None:
            if i is None:
                return settle()
            busy[0] += 1
            conn = self._take()
            if conn is None:
                self._tasks.spawn(connect_then_send(i))
            else:
                send(i, conn, True)

        def send(i: int, conn: _Conn, reused: bool, started: tuple[float, float] | None = None) -> None:
            def done(out: Outcome, retry: bool) -> None:
                try:
                    busy[0] -= 1
                    if retry:
                        busy[0] += 1
                        self._tasks.spawn(connect_then_send(i))
                        return
                    results.append((i, out))
                    start(take())
                except BaseException as e:  # noqa: BLE001 - handed to the caller's future: never leave it waiting
                    if not finished.done():
                        finished.set_exception(e)

            self._launch(conn, requests[i], timeout, reused, done, started)

        async def connect_then_send(i: int) -> None:
            started = self._clock()
            conn = await self._connect(timeout)
            if isinstance(conn, Outcome):
                busy[0] -= 1
                results.append((i, conn))
                return start(take())
            send(i, conn, False, started)

        for _ in range(max(1, concurrency)):
            start(take())
        await self._wait(finished)
        return results

    async def close(self) -> None:
        self._tasks.cancel()
        for c in list(self._all):
            c.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)
