"""The emulator's scripted mode: an OpenAI-compatible streaming server with known TTFT and ITL, nothing else.

It is the one scripted reference server: the ruler the benchmark client is calibrated against
(bench.load.calibration, benchmarks/client_fidelity.py), the exact token timing tests rely on, and a
local or sandbox node serving https with its certificate. It is configured like any emulator
(``mode: "scripted"``, config.Scripted is the script) and started by the emulator's command line,
but it does not run behind the roofline's aiohttp front end: a ruler must cost far less than what
it measures, so this is a raw-socket server. Every chunk has an absolute due time (arrival + TTFT
+ j x chunk gap, never drifting), one heap schedules all streams, chunk frames are pre-built bytes,
requests are parsed by httptools, and a request's clock starts at the kernel's receive timestamp,
not when this (possibly busy) process got round to it. TLS is a MemoryBIO filter on the same
socket, so https keeps those timestamps.

It records how late it wrote each first chunk (GET /stats, and in each usage chunk as
``scripted_first_chunk_late_us``), so a client error can be split between the client and the
server; /stats also gives the requests' arrival rate and the coefficient of variation of their
inter-arrival gaps, how an open-loop client's pacing looks from the server. ``precise`` polls
instead of sleeping near a due time (timer granularity is ~1 ms); use it only when the server has a
core to itself.

``ScriptedServerProcess`` starts it on a free loopback port (tests, benchmarks, calibration).
"""

from __future__ import annotations

import asyncio
import heapq
import hmac
import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httptools

from bakeoff import tokens
from bakeoff.serving.emulator.config import STOP_ROUTE, EmulatorConfig
from bakeoff.serving.emulator.engine import Stats
from bakeoff.serving.emulator.server import metrics_text, stop_soon, version_info

_now = time.perf_counter
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux value; absent elsewhere
_TS = struct.Struct("qq")
_ANC = socket.CMSG_SPACE(_TS.size)
_KEY_ENV = "BAKEOFF_SCRIPTED_API_KEY"


@dataclass
class _Stream:
    conn: _ServerConn = field(compare=False)
    chunks: int = field(compare=False)
    tokens: int = field(compare=False)
    sent: int = field(compare=False, default=0)
    t0: float = field(compare=False, default=0.0)
    itl: float = field(compare=False, default=0.0)
    ttft: float = field(compare=False, default=0.0)
    frames: list[bytes] = field(compare=False, default_factory=list)
    last: bytes = field(compare=False, default=b"")
    tail: tuple[str, int, int] | None = field(compare=False, default=None)
    late: float = field(compare=False, default=0.0)


def _frame(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict[str, Any]) -> bytes:
    return _frame(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


def arrival_stats(arrivals: list[float]) -> dict[str, Any]:
    """How requests reached the server: their rate over the arrival span and the coefficient of
    variation of the gaps (1.0 for Poisson arrivals; a client that stalls and then catches up
    makes them burstier, > 1), so an open-loop client's pacing is judged where it matters."""
    a = sorted(arrivals)
    gaps = [y - x for x, y in zip(a, a[1:], strict=False)]
    if len(gaps) < 2 or a[-1] <= a[0]:
        return {"arrivals": len(a), "arrival_rate_rps": None, "arrival_cv": None}
    mean = sum(gaps) / len(gaps)
    sd = (sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)) ** 0.5
    return {"arrivals": len(a), "arrival_rate_rps": len(gaps) / (a[-1] - a[0]), "arrival_cv": sd / mean}


class ScriptedServer:
    def __init__(self, config: EmulatorConfig, loop: asyncio.AbstractEventLoop):
        self.config = config
        self.s = config.scripted
        self.model = config.served_model
        key = config.api_key()
        self.expected_auth = f"Bearer {key}".encode() if key else None
        self.loop = loop
        self.heap: list[tuple[float, int, _Stream]] = []
        self.conns: set[_ServerConn] = set()
        self.seq = 0
        self.inflight = 0
        self.requests = 0
        self.stats = Stats()  # the counters /metrics reports, as the roofline engine's
        self.lateness: list[float] = []  # first-chunk write time minus due time, seconds
        self.arrivals: list[float] = []  # kernel receive time of each streamed request (perf_counter s)
        self.handle: asyncio.Handle | None = None
        self.handle_due = float("inf")
        self.version = json.dumps(version_info(config, None)).encode()
        k = self.s.tokens_per_chunk
        texts = [
            " " + " ".join(tokens.VOCAB[(i + j) % len(tokens.VOCAB)] for j in range(k))
            for i in range(len(tokens.VOCAB))
        ]
        self.frames = {kind: [self._chunk(kind, t, None) for t in texts] for kind in ("completions", "chat")}

    def _chunk(self, kind: str, text: str, finish: str | None) -> bytes:
        m = self.model
        if kind == "chat":
            obj = {
                "id": "chatcmpl-scripted",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": m,
                "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}],
            }
        else:
            obj = {
                "id": "cmpl-scripted",
                "object": "text_completion",
                "created": 0,
                "model": m,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}],
            }
        return _event(obj)

    # --- scheduling --------------------------------------------------------------------------
    def start_stream(
        self, conn: _ServerConn, kind: str, prompt_tokens: int, max_tokens: int, usage: bool, arrived: float
    ) -> None:
        s = self.s
        n = s.output_tokens or max_tokens
        k = s.tokens_per_chunk
        chunks = -(-n // k)
        self.inflight += 1
        self.arrivals.append(arrived)
        ttft = (s.ttft_ms + s.ttft_per_inflight_ms * self.inflight) / 1e3
        itl = k * (s.itl_ms + s.itl_per_inflight_ms * self.inflight) / 1e3  # one chunk's gap
        last_n = n - k * (chunks - 1)
        last_text = " " + " ".join(tokens.VOCAB[j % len(tokens.VOCAB)] for j in range(last_n))
        tail = (kind, prompt_tokens, n) if usage and s.include_usage else None
        self.seq += 1
        st = _Stream(
            conn,
            chunks,
            n,
            t0=arrived,
            itl=itl,
            ttft=ttft,
            frames=self.frames[kind],
            last=self._chunk(kind, last_text, "length"),
            tail=tail,
        )
        conn.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        heapq.heappush(self.heap, (arrived + ttft, self.seq, st))
        self._arm()

    def _tail(self, st: _Stream) -> bytes:
        """Usage chunk (when asked for), [DONE] and the chunked terminator. The usage carries the
        server's own lateness on this request's first chunk, so a benchmark can tell the
        client's share of a TTFT error from the server's."""
        out = b""
        if st.tail is not None:
            kind, p, n = st.tail
            out = _event(
                {
                    "id": "cmpl-scripted",
                    "object": "text_completion" if kind == "completions" else "chat.completion.chunk",
                    "created": 0,
                    "model": self.model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": p,
                        "completion_tokens": n,
                        "total_tokens": p + n,
                        "scripted_first_chunk_late_us": round(st.late * 1e6, 1),
                    },
                }
            )
        return out + _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"

    def _arm(self) -> None:
        if not self.heap:
            return
        due = self.heap[0][0]
        if self.handle is not None and self.handle_due <= due:
            return
        if self.handle is not None:
            self.handle.cancel()
        wait = due - _now()
        self.handle_due = due
        if self.s.precise and wait < 0.002:
            self.handle = self.loop.call_soon(self._pump)
        else:
            self.handle = self.loop.call_later(max(0.0, wait - (0.0015 if self.s.precise else 0.0)), self._pump)

    def _pump(self) -> None:
        self.handle = None
        self.handle_due = float("inf")
        heap = self.heap
        now = _now()
        pop, push, nframes = heapq.heappop, heapq.heappush, len(self.frames["chat"])
        while heap:
            if heap[0][0] > now:  # the clock is read again only when nothing seems due
                now = _now()
                if heap[0][0] > now:
                    break
            due, seq, st = pop(heap)
            if st.conn.closed:  # the client went away mid-stream
                self.inflight -= 1
                self.stats.aborted += 1
                continue
            if st.sent == 0:
                st.late = _now() - due
                self.lateness.append(st.late)
                self.stats.lateness(st.late)
            if st.itl == 0:  # zero ITL: everything at once
                st.conn.write(
                    b"".join(st.frames[j % nframes] for j in range(st.sent, st.chunks - 1)) + st.last + self._tail(st)
                )
                st.sent = st.chunks
            else:
                st.sent += 1
                if st.sent == st.chunks:
                    st.conn.write(st.last + self._tail(st))
                else:
                    st.conn.write(st.frames[st.sent % nframes])
            if st.sent >= st.chunks:
                self.inflight -= 1
                self.stats.generation_tokens += st.tokens
                self.stats.finished["length"] += 1
            else:
                if self.s.itl_per_inflight_ms:  # a saturating server: gaps follow the current load
                    s = self.s
                    nxt = due + s.tokens_per_chunk * (s.itl_ms + s.itl_per_inflight_ms * self.inflight) / 1e3
                else:  # absolute schedule: lateness never accumulates
                    nxt = st.t0 + st.ttft + st.sent * st.itl
                push(heap, (nxt, seq, st))
        self._arm()

    def stats_json(self) -> dict[str, Any]:
        lat = sorted(self.lateness)

        def pick(q: float) -> float | None:
            return lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3 if lat else None

        return {
            "requests": self.requests,
            "first_chunk_late_ms_mean": (sum(lat) / len(lat) * 1e3) if lat else None,
            "first_chunk_late_ms_p50": pick(0.5),
            "first_chunk_late_ms_p99": pick(0.99),
            "first_chunk_late_ms_max": lat[-1] * 1e3 if lat else None,
            **arrival_stats(self.arrivals),
        }

    def metrics(self) -> bytes:
        return metrics_text(self.model, 1.0, self.inflight, 0, 0.0, self.stats)


class _ServerConn:
    """One client connection on a raw non-blocking socket. Reads carry the kernel's receive
    timestamp, so a request's TTFT clock starts when it reached this machine. With TLS the
    records pass through an in-memory SSLObject, so the socket path stays the same."""

    def __init__(self, server: ScriptedServer, sock: socket.socket, tls: ssl.SSLContext | None):
        self.srv, self.sock, self.loop = server, sock, server.loop
        self.fd = sock.fileno()
        self.closed = False
        self.out = b""
        self.rx = 0.0
        self.url = b""
        self.body: list[bytes] = []
        self.auth: bytes | None = None
        self.tls: ssl.SSLObject | None = None
        self.tls_in, self.tls_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.handshaken = False
        if tls is not None:
            self.tls = tls.wrap_bio(self.tls_in, self.tls_out, server_side=True)
        self.parser = httptools.HttpRequestParser(self)
        server.conns.add(self)
        self.loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        try:
            data, anc, _, _ = self.sock.recvmsg(1 << 16, _ANC)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return self.close()
        if not data:
            return self.close()
        if anc:
            sec, ns = _TS.unpack_from(anc[0][2])
            self.rx = sec + ns * 1e-9 - (time.time() - _now())
        else:
            self.rx = _now()
        if self.tls is not None:
            data = self._decrypt(data)
            if not data or self.closed:
                return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._reply(400, b'{"error":"bad request"}', close=True)

    def _decrypt(self, data: bytes) -> bytes:
        """TLS records in, plaintext out; what the handshake has to say goes straight back."""
        assert self.tls is not None
        self.tls_in.write(data)
        plain = []
        try:
            if not self.handshaken:
                self.tls.do_handshake()
                self.handshaken = True
            while chunk := self.tls.read(1 << 16):
                plain.append(chunk)
        except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
            pass
        except ssl.SSLError:  # not TLS, or a certificate the client refused: nothing to serve
            self._send(self.tls_out.read())
            self.close()
            return b""
        if pending := self.tls_out.read():
            self._send(pending)
        return b"".join(plain)

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        if self.tls is not None:
            self.tls.write(data)
            data = self.tls_out.read()
        self._send(data)

    def _send(self, data: bytes) -> None:
        if self.closed or not data:
            return
        if self.out:
            self.out += data
            return
        try:
            n = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            return self.close()
        if n < len(data):
            self.out = data[n:]
            self.loop.add_writer(self.fd, self._writable)

    def _writable(self) -> None:
        try:
            n = self.sock.send(self.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return self.close()
        self.out = self.out[n:]
        if not self.out:
            self.loop.remove_writer(self.fd)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.srv.conns.discard(self)
            self.loop.remove_reader(self.fd)
            self.loop.remove_writer(self.fd)
            self.sock.close()

    # httptools callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self.url, self.body, self.auth = b"", [], None

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"authorization":
            self.auth = value

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def _reply(self, code: int, body: bytes, ctype: bytes = b"application/json", close: bool = False) -> None:
        reason = {200: b"OK", 202: b"Accepted", 400: b"Bad Request", 401: b"Unauthorized", 404: b"Not Found"}.get(
            code, b"Error"
        )
        self.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n%s"
            % (code, reason, ctype, len(body), b"connection: close\r\n" if close else b"", body)
        )
        if close:
            self.close()

    def on_message_complete(self) -> None:
        srv, s = self.srv, self.srv.s
        path = self.url.split(b"?")[0].decode("latin-1")
        expected = srv.expected_auth
        if expected and path.startswith("/v1") and not hmac.compare_digest(self.auth or b"", expected):
            return self._reply(
                401,
                b'{"error":{"message":"Unauthorized: send the server\'s API key as \'Authorization: Bearer <key>\'",'
                b'"type":"invalid_request_error","code":"invalid_api_key"}}',
            )
        if self.parser.get_method() == b"GET":
            return self._get(path)
        if path == STOP_ROUTE:
            return self._stop()
        if path == "/tokenize":
            return self._tokenize()
        kind = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}.get(path)
        if kind is None:
            return self._reply(404, b'{"error":"not found"}')
        try:
            req = json.loads(b"".join(self.body))
            max_tokens = int(req.get("max_tokens") or 16)
            prompt = " ".join(str(m.get("content", "")) for m in req["messages"]) if kind == "chat" else req["prompt"]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            return self._reply(400, json.dumps({"error": {"message": f"bad request body: {e}"}}).encode())
        srv.requests += 1
        usage = bool((req.get("stream_options") or {}).get("include_usage"))
        n_in = tokens.count(prompt)
        srv.stats.prompt_tokens += n_in
        if req.get("stream"):
            srv.start_stream(self, kind, n_in, max_tokens, usage, self.rx)
            return
        n = s.output_tokens or max_tokens
        text = " ".join(tokens.VOCAB[j % len(tokens.VOCAB)] for j in range(n))
        body = {
            "id": "cmpl-scripted",
            "object": "text_completion",
            "model": srv.model,
            "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
            "usage": {"prompt_tokens": n_in, "completion_tokens": n, "total_tokens": n_in + n},
        }
        srv.stats.generation_tokens += n
        srv.stats.finished["length"] += 1
        delay = (s.ttft_ms + s.itl_ms * max(0, n - 1)) / 1e3
        srv.loop.call_later(delay, self._reply, 200, json.dumps(body).encode())

    def _stop(self) -> None:
        opens = self.srv.config.opens_stop(self.auth)
        if opens is None:
            return self._reply(404, b'{"error":"not found"}')
        if not opens:
            return self._reply(
                401, b'{"error":{"message":"Unauthorized: send the stop key","type":"invalid_request_error"}}'
            )
        self._reply(202, b'{"stopping":true}')
        stop_soon()

    def _get(self, path: str) -> None:
        srv = self.srv
        if path == "/health":
            return self._reply(200, b"")
        if path == "/v1/models":
            ctx = srv.config.target.model_spec.context if srv.config.target else None
            card = {"id": srv.model, "object": "model", "owned_by": "bakeoff-emulator", "max_model_len": ctx}
            return self._reply(200, json.dumps({"object": "list", "data": [card]}).encode())
        if path == "/version":
            return self._reply(200, srv.version)
        if path == "/metrics":
            return self._reply(200, srv.metrics(), b"text/plain; version=0.0.4; charset=utf-8")
        if path == "/stats":
            body = json.dumps(srv.stats_json()).encode()
            if b"reset=1" in self.url:
                srv.lateness.clear()
                srv.arrivals.clear()
            return self._reply(200, body)
        return self._reply(404, b'{"error":"not found"}')

    def _tokenize(self) -> None:
        """vLLM's POST /tokenize under the scripted convention (one word, one token)."""
        try:
            req = json.loads(b"".join(self.body))
            text = (
                " ".join(str(m.get("content", "")) for m in req["messages"])
                if "messages" in req
                else str(req["prompt"])
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            return self._reply(400, json.dumps({"error": {"message": f"bad request body: {e}"}}).encode())
        n = tokens.count(text)
        self._reply(200, json.dumps({"count": n, "max_model_len": None, "tokens": list(range(n))}).encode())


class Listener:
    """The listening socket; closing it also closes every open connection."""

    def __init__(self, srv: ScriptedServer, sock: socket.socket, tls: ssl.SSLContext | None):
        self.srv, self.sock, self.tls = srv, sock, tls
        self.port: int = sock.getsockname()[1]
        srv.loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # BlockingIOError: none left to accept
                return
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                conn.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            except OSError:
                pass
            _ServerConn(self.srv, conn, self.tls)

    def close(self) -> None:
        self.srv.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        for conn in list(self.srv.conns):
            conn.close()


def serve(config: EmulatorConfig, host: str, port: int, tls: ssl.SSLContext | None = None) -> Listener:
    """Listen on host:port (0: a free one) on the running loop; answer by config.scripted."""
    srv = ScriptedServer(config, asyncio.get_running_loop())
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(4096)
    sock.setblocking(False)
    return Listener(srv, sock, tls)


MAX_LIFETIME_S = 6 * 3600  # longer than any calibration, test module or benchmark script using it


class ScriptedServerProcess:
    """``python -m bakeoff.serving.emulator`` in scripted mode on a free loopback port; killed on exit.

    script is config.Scripted as a mapping; with api_key the /v1 routes need it, with tls (a
    certificate and key PEM file) the server speaks https only."""

    def __init__(
        self,
        script: dict[str, Any],
        cpu: int | None = None,
        served_model: str = "scripted",
        api_key: str | None = None,
        tls: tuple[str, str] | None = None,
    ):
        self.cfg = {
            "mode": "scripted",
            "served_model": served_model,
            "api_key_env": _KEY_ENV if api_key else None,
            "scripted": script,
            # a parent killed before it could stop the server (SIGKILL, a CI timeout) leaves no server behind
            "expires_at": time.time() + MAX_LIFETIME_S,
        }
        self.cpu, self.api_key, self.tls = cpu, api_key, tls
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    def __enter__(self) -> ScriptedServerProcess:
        self._dir = tempfile.TemporaryDirectory(prefix="bakeoff-scripted-")
        d = Path(self._dir.name)
        (d / "config.json").write_text(json.dumps(self.cfg))
        cmd = [sys.executable, "-m", "bakeoff.serving.emulator", "--config", str(d / "config.json")]
        cmd += ["--host", "127.0.0.1", "--port", "0", "--port-file", str(d / "port")]
        if self.cpu is not None:
            cmd += ["--cpu", str(self.cpu)]
        if self.tls:
            cmd += ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]]
        env = {k: v for k, v in os.environ.items() if k != _KEY_ENV}
        if self.api_key:
            env[_KEY_ENV] = self.api_key
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while not (d / "port").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError("scripted server did not start (see its stderr above)")
            time.sleep(0.02)
        self.port = int((d / "port").read_text())
        return self

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._dir.cleanup()


def server_cpu() -> int | None:
    """A core for the scripted server away from the client: a child inherits the client's affinity,
    and a server sharing the client's one core would be measured as the client's own error. The
    highest usable CPU outside the client's set, else the highest of its set; None on one core."""
    try:
        mine = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return None
    try:
        usable = os.sched_getaffinity(1) | mine
    except OSError:
        usable = set(range(os.cpu_count() or 1))
    others = sorted(usable - mine)
    if others:
        return others[-1]
    return max(mine) if len(mine) > 1 else None
