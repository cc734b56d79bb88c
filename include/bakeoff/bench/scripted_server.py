"""A scripted OpenAI-compatible streaming server: known TTFT and ITL, nothing else.

It is the ruler the client is measured against (self-calibration, benchmarks/client_fidelity.py),
so it is built to keep its own schedule: every chunk has an absolute due time (send + TTFT + j x ITL,
never drifting), one heap schedules all streams, chunk frames are pre-built bytes, and it records how
late it actually wrote each first chunk (GET /stats), so a client error can be split between the
client and the server; /stats also gives the requests' arrival rate and the coefficient of
variation of their inter-arrival gaps (kernel receive times), how an open-loop client's pacing
looks from the server. ``precise`` mode polls instead of sleeping near a due time (timer granularity
is ~1 ms); use it only when the server has a core to itself.

    python -m bakeoff.bench.scripted_server --config CONFIG.json --host 127.0.0.1 --port 0 --port-file F
CONFIG: {"served_model": "m", "scripted": {"ttft_ms": 100, "itl_ms": 10, "tokens_per_chunk": 1}}
(the emulator's scripted-mode shape) or the "scripted" mapping alone.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import os
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httptools

from bakeoff import tokens

_now = time.perf_counter
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TS = struct.Struct("qq")
_ANC = socket.CMSG_SPACE(_TS.size)


@dataclass
class Script:
    ttft_ms: float = 100.0
    itl_ms: float = 10.0
    tokens_per_chunk: int = 1
    output_tokens: int | None = None  # fixed output length; default: the request's max_tokens
    ttft_per_inflight_ms: float = 0.0  # TTFT grows with requests in flight (a saturating server)
    itl_per_inflight_ms: float = 0.0  # each gap grows with the requests in flight at that moment
    include_usage: bool = True  # False: never send usage (a misbehaving server)
    served_model: str = "scripted"
    api_key: str | None = None
    precise: bool = False

    @classmethod
    def from_config(cls, cfg: dict) -> "Script":
        inner = dict(cfg.get("scripted", cfg))
        inner.pop("mode", None)
        if "served_model" in cfg:
            inner["served_model"] = cfg["served_model"]
        if cfg.get("api_key_env"):
            inner["api_key"] = os.environ.get(cfg["api_key_env"])
        known = set(cls.__dataclass_fields__)
        unknown = set(inner) - known
        if unknown:
            raise ValueError(f"scripted: unknown field(s) {sorted(unknown)}; use {sorted(known)}")
        return cls(**inner)


@dataclass
class _Stream:
    conn: "_ServerConn" = field(compare=False)
    chunks: int = field(compare=False)
    sent: int = field(compare=False, default=0)
    t0: float = field(compare=False, default=0.0)
    itl: float = field(compare=False, default=0.0)
    ttft: float = field(compare=False, default=0.0)
    frames: list = field(compare=False, default_factory=list)
    last: bytes = field(compare=False, default=b"")
    tail: tuple | None = field(compare=False, default=None)
    late: float = field(compare=False, default=0.0)


def _frame(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj) -> bytes:
    return _frame(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


def arrival_stats(arrivals: list[float]) -> dict:
    """How requests reached the server: their rate over the arrival span and the coefficient of
    variation of the gaps (1.0 for Poisson arrivals; a client that stalls and then catches up
    makes them burstier, > 1), so an open-loop client's pacing is judged where it matters."""
    a = sorted(arrivals)
    gaps = [y - x for x, y in zip(a, a[1:])]
    if len(gaps) < 2 or a[-1] <= a[0]:
        return {"arrivals": len(a), "arrival_rate_rps": None, "arrival_cv": None}
    mean = sum(gaps) / len(gaps)
    sd = (sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)) ** 0.5
    return {"arrivals": len(a), "arrival_rate_rps": len(gaps) / (a[-1] - a[0]), "arrival_cv": sd / mean}


class ScriptedServer:
    def __init__(self, script: Script):
        self.s = script
        self.heap: list[_Stream] = []
        self.seq = 0
        self.inflight = 0
        self.requests = 0
        self.lateness: list[float] = []  # first-chunk write time minus due time, seconds
        self.arrivals: list[float] = []  # kernel receive time of each streamed request (perf_counter s)
        self.handle: asyncio.Handle | None = None
        self.handle_due = float("inf")
        self.loop: asyncio.AbstractEventLoop | None = None
        k = max(1, script.tokens_per_chunk)
        self.texts = [
            " " + " ".join(tokens.VOCAB[(i + j) % len(tokens.VOCAB)] for j in range(k))
            for i in range(len(tokens.VOCAB))
        ]
        self.frames = {kind: [self._chunk(kind, t, None) for t in self.texts] for kind in ("completions", "chat")}

    def _chunk(self, kind: str, text: str, finish: str | None) -> bytes:
        m = self.s.served_model
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
        self, conn: "_ServerConn", kind: str, prompt_tokens: int, max_tokens: int, usage: bool, arrived: float
    ) -> None:
        s = self.s
        n = s.output_tokens or max_tokens
        k = max(1, s.tokens_per_chunk)
        chunks = -(-n // k)
        self.inflight += 1
        self.arrivals.append(arrived)
        ttft = (s.ttft_ms + s.ttft_per_inflight_ms * self.inflight) / 1e3
        itl = (s.itl_ms + s.itl_per_inflight_ms * self.inflight) / 1e3
        t0 = arrived
        last_n = n - k * (chunks - 1)
        last_text = " " + " ".join(tokens.VOCAB[j % len(tokens.VOCAB)] for j in range(last_n))
        tail = None
        if usage and s.include_usage:
            tail = (kind, prompt_tokens, n)
        self.seq += 1
        st = _Stream(
            conn,
            chunks,
            t0=t0,
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
        heapq.heappush(self.heap, (t0 + ttft, self.seq, st))
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
                    "model": self.s.served_model,
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
            if st.conn.closed:
                self.inflight -= 1
                continue
            if st.sent == 0:
                st.late = _now() - due
                self.lateness.append(st.late)
            if st.itl == 0:  # zero ITL: everything at once
                st.conn.write(
                    b"".join(st.frames[j % len(st.frames)] for j in range(st.sent, st.chunks - 1))
                    + st.last
                    + self._tail(st)
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
                st.conn.done_response()
            else:
                if self.s.itl_per_inflight_ms:  # a saturating server: gaps follow the current load
                    nxt = due + (self.s.itl_ms + self.s.itl_per_inflight_ms * self.inflight) / 1e3
                else:  # absolute schedule: lateness never accumulates
                    nxt = st.t0 + st.ttft + st.sent * st.itl
                push(heap, (nxt, seq, st))
        self._arm()

    def stats(self) -> dict:
        lat = sorted(self.lateness)
        pick = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3) if lat else (lambda q: None)
        return {
            "requests": self.requests,
            "first_chunk_late_ms_mean": (sum(lat) / len(lat) * 1e3) if lat else None,
            "first_chunk_late_ms_p50": pick(0.5),
            "first_chunk_late_ms_p99": pick(0.99),
            "first_chunk_late_ms_max": lat[-1] * 1e3 if lat else None,
            **arrival_stats(self.arrivals),
        }


class _ServerConn:
    """One client connection on a raw non-blocking socket. Reads carry the kernel's receive
    timestamp, so a request's TTFT clock starts when it reached this machine, not when this
    (possibly busy) process got round to parsing it."""

    def __init__(self, server: ScriptedServer, sock: socket.socket):
        self.srv, self.sock, self.loop = server, sock, server.loop
        self.fd = sock.fileno()
        self.closed = False
        self.busy = False
        self.out = b""
        self.rx = 0.0
        self.parser = httptools.HttpRequestParser(self)
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
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._reply(400, b'{"error":"bad request"}', close=True)

    def write(self, data: bytes) -> None:
        if self.closed:
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
            self.loop.remove_reader(self.fd)
            self.loop.remove_writer(self.fd)
            self.sock.close()

    def on_message_begin(self) -> None:
        self.url, self.body, self.auth = b"", [], None

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"authorization":
            self.auth = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def done_response(self) -> None:
        self.busy = False

    def _reply(self, code: int, body: bytes, ctype: bytes = b"application/json", close: bool = False) -> None:
        reason = {200: b"OK", 400: b"Bad Request", 401: b"Unauthorized", 404: b"Not Found"}.get(code, b"Error")
        self.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n%s"
            % (code, reason, ctype, len(body), b"connection: close\r\n" if close else b"", body)
        )
        if close:
            self.close()

    def on_message_complete(self) -> None:
        srv, s = self.srv, self.srv.s
        path = self.url.split(b"?")[0].decode("latin-1")
        method = self.parser.get_method()
        if s.api_key and self.auth != f"Bearer {s.api_key}" and path != "/health":
            return self._reply(401, b'{"error":{"message":"invalid api key","type":"unauthorized"}}')
        if method == b"GET":
            if path == "/health":
                return self._reply(200, b"")
            if path == "/v1/models":
                return self._reply(
                    200,
                    json.dumps(
                        {
                            "object": "list",
                            "data": [{"id": s.served_model, "object": "model", "owned_by": "bakeoff-scripted"}],
                        }
                    ).encode(),
                )
            if path == "/version":
                return self._reply(200, b'{"version":"bakeoff-scripted-1"}')
            if path == "/metrics":
                return self._reply(
                    200,
                    (
                        f"# TYPE scripted_requests_total counter\nscripted_requests_total {srv.requests}\n"
                        f"scripted_requests_running {srv.inflight}\n"
                    ).encode(),
                    b"text/plain",
                )
            if path == "/stats":
                body = json.dumps(srv.stats()).encode()
                if b"reset=1" in self.url:
                    srv.lateness.clear()
                    srv.arrivals.clear()
                return self._reply(200, body)
            return self._reply(404, b'{"error":"not found"}')
        if path == "/tokenize":
            return self._tokenize()
        kind = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}.get(path)
        if kind is None:
            return self._reply(404, b'{"error":"not found"}')
        try:
            req = json.loads(b"".join(self.body))
            max_tokens = int(req.get("max_tokens") or 16)
            if kind == "chat":
                prompt = " ".join(str(m.get("content", "")) for m in req["messages"])
            else:
                prompt = req["prompt"]
        except (ValueError, KeyError, TypeError) as e:
            return self._reply(400, json.dumps({"error": {"message": f"bad request body: {e}"}}).encode())
        srv.requests += 1
        usage = bool((req.get("stream_options") or {}).get("include_usage"))
        n_in = tokens.count(prompt)
        if req.get("stream"):
            self.busy = True
            srv.start_stream(self, kind, n_in, max_tokens, usage, self.rx)
        else:
            n = s.output_tokens or max_tokens
            text = " ".join(tokens.VOCAB[j % len(tokens.VOCAB)] for j in range(n))
            body = {
                "id": "cmpl-scripted",
                "object": "text_completion",
                "model": s.served_model,
                "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                "usage": {"prompt_tokens": n_in, "completion_tokens": n, "total_tokens": n_in + n},
            }
            delay = (s.ttft_ms + s.itl_ms * max(0, n - 1)) / 1e3
            srv.loop.call_later(delay, self._reply, 200, json.dumps(body).encode())

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


class _Listener:
    def __init__(self, srv: ScriptedServer, sock: socket.socket):
        self.srv, self.sock = srv, sock
        srv.loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                conn.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            except OSError:
                pass
            _ServerConn(self.srv, conn)

    def close(self) -> None:
        self.srv.loop.remove_reader(self.sock.fileno())
        self.sock.close()


async def serve(script: Script, host: str = "127.0.0.1", port: int = 0) -> tuple[_Listener, int]:
    srv = ScriptedServer(script)
    srv.loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(4096)
    sock.setblocking(False)
    return _Listener(srv, sock), sock.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bakeoff.bench.scripted_server", description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="JSON file (see module docs)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="write the bound port here once listening")
    ap.add_argument("--cpu", type=int, help="pin this process to one CPU (os.sched_setaffinity)")
    a = ap.parse_args(argv)
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    script = Script.from_config(json.loads(Path(a.config).read_text()))

    async def run() -> None:
        server, port = await serve(script, a.host, a.port)
        if a.port_file:
            tmp = Path(a.port_file + ".tmp")
            tmp.write_text(str(port))
            tmp.replace(a.port_file)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await stop.wait()
        server.close()

    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
