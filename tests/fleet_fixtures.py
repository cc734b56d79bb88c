"""Real parts for the client-fleet tests: a loopback server that logs when requests arrive, a real
redis-server on a free loopback port, and real Celery client workers (bench.fleet_celery) on it."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web

from tests.bench.threaded_app import ThreadedApp


class ThreadMember:
    """A member handle for a scripted member running on a thread."""

    def __init__(self, fn) -> None:
        self.t = threading.Thread(target=fn, daemon=True)
        self.t.start()

    def is_alive(self) -> bool:
        return self.t.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self.t.join(timeout)

    def terminate(self) -> None:
        pass


class ArrivalServer(ThreadedApp):
    """Streams ``tokens`` tokens after ``delay_s``; logs each request's arrival (epoch s) and the
    number in flight at every arrival. With ``api_key``, a request without that bearer key gets 401."""

    def __init__(self, delay_s: float = 0.02, tokens: int = 2, api_key: str | None = None):
        super().__init__()
        self.delay_s, self.tokens, self.api_key = delay_s, tokens, api_key
        self.arrivals: list[float] = []
        self.refused = 0
        self.in_flight = 0
        self.peak = 0
        self.lock = threading.Lock()

    def build(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        t = time.time()
        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            with self.lock:
                self.refused += 1
            return web.Response(status=401)
        with self.lock:
            self.arrivals.append(t)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            await request.read()
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await asyncio.sleep(self.delay_s)
            for i in range(self.tokens):
                fin = "length" if i == self.tokens - 1 else None
                chunk = {"object": "text_completion", "choices": [{"index": 0, "text": " x", "finish_reason": fin}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            usage = {"prompt_tokens": 8, "completion_tokens": self.tokens, "total_tokens": 8 + self.tokens}
            await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())
            return resp
        finally:
            with self.lock:
                self.in_flight -= 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_server(tmp: Path) -> Iterator[str]:
    """A password-protected redis-server on a free loopback port; yields its URL (database 0)."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (make system-deps installs Debian's)")
    import redis  # only where a broker is started

    port, password = _free_port(), secrets.token_hex(16)
    proc = subprocess.Popen(
        [exe, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(tmp)]
        + ["--requirepass", password],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://:{password}@127.0.0.1:{port}/0"
    try:
        for _ in range(100):
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        else:
            raise RuntimeError("redis-server did not answer in 10 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


class ClientWorkers:
    """Celery client workers of bench.fleet_celery, one process (solo pool: one member) each."""

    def __init__(self, url: str, names: list[str], log_dir: Path, env: dict[str, str]):
        self.url, self.names = url, names
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs = {n: log_dir / f"{n}.log" for n in names}
        base = {**os.environ, **env, "BAKEOFF_FLEET_BROKER": url, "PYTHONUNBUFFERED": "1"}
        for n in names:
            argv = [sys.executable, "-m", "celery", "-A", "bakeoff.bench.fleet.fleet_celery", "worker"]
            argv += ["-Q", "bakeoff-clients", "--pool", "solo", "-n", f"{n}@%h", "--without-mingle"]
            argv += ["--without-gossip", "--loglevel", "INFO"]
            with self.logs[n].open("wb") as out:
                self.procs[n] = subprocess.Popen(
                    argv, env=base, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for n, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"client worker {n} exited: {self.logs[n].read_text()[-2000:]}")
            if all(" ready." in self.logs[n].read_text() for n in self.names):
                return
            time.sleep(0.2)
        raise RuntimeError("client workers not ready: " + " | ".join(p.read_text()[-500:] for p in self.logs.values()))

    def worker_name(self, n: str) -> str:
        return f"{n}@{socket.gethostname()}"

    def kill(self, n: str) -> None:
        """SIGKILL a worker's process group: its member dies as a host's would, without a goodbye."""
        os.killpg(self.procs[n].pid, signal.SIGKILL)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)


@contextmanager
def client_workers(url: str, names: list[str], log_dir: Path, env: dict[str, str]) -> Iterator[ClientWorkers]:
    w = ClientWorkers(url, names, log_dir, env)
    try:
        w.wait_ready()
        yield w
    finally:
        w.stop()


class BrokerTap:
    """Everything sent to the broker's Redis, as a reader of it sees it (Redis MONITOR)."""

    def __init__(self, url: str):
        import redis  # only where a broker is started

        self.commands: list[str] = []
        self._monitor = redis.Redis.from_url(url).monitor()
        self._monitor.__enter__()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        try:
            for cmd in self._monitor.listen():
                self.commands.append(str(cmd.get("command", "")))
        except Exception:  # noqa: BLE001 - the tap ends when its connection is closed
            pass

    def text(self) -> str:
        time.sleep(0.2)  # the last commands reach the tap
        return "\n".join(self.commands)

    def close(self) -> None:
        self._monitor.connection.disconnect()
