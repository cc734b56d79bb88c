"""Servers the benchmark tests talk to: a misbehaving one (below), the roofline emulator as a process
(``emulator``) and the scripted one (library).

The faulty server picks its behaviour from the request's ``model`` field, so one server covers every
misbehaviour: model "fault:<kind>" (kinds in FAULTS), anything else streams normally.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess
import sys
import time

import pytest
from aiohttp import web

from bakeoff.plan import Target
from tests.bench.threaded_app import ThreadedApp

API_KEY = web.AppKey("api_key", object)
FAULTS = (
    "ok",
    "http_400",
    "http_503",
    "reset",
    "hang",
    "silent",
    "truncated",
    "malformed",
    "empty_choices",
    "no_usage",
    "reasoning",
    "multi",
    "early_stop",
    "error_event",
    "mismatch",
    "crlf",
    "byte_fallback",
)


def _chunk(kind: str, text: str, finish=None, reasoning: str | None = None) -> dict:
    if kind == "chat":
        delta = {"content": text} if reasoning is None else {"reasoning_content": reasoning, "content": None}
        return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


async def _handle(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    fault = str(body.get("model", "")).removeprefix("fault:")
    kind = "chat" if request.path.endswith("chat/completions") else "completions"
    n = int(body.get("max_tokens") or 8)
    if request.app[API_KEY] and request.headers.get("Authorization") != f"Bearer {request.app[API_KEY]}":
        return web.json_response({"error": {"message": "bad key"}}, status=401)
    if fault == "http_400":
        return web.json_response({"error": {"message": "max_tokens too large"}}, status=400)
    if fault == "http_503":
        return web.json_response({"error": {"message": "overloaded"}}, status=503)
    if fault == "silent":
        await asyncio.sleep(3600)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    sep = "\r\n\r\n" if fault == "crlf" else "\n\n"

    async def send(obj) -> None:
        await resp.write(("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + sep).encode())

    await asyncio.sleep(0.01)
    if fault == "malformed":
        await send("{not json")
    elif fault == "error_event":
        await send({"error": {"message": "engine died", "code": 500}})
    elif fault == "empty_choices":
        for _ in range(3):
            await send({"object": "text_completion", "choices": []})
    elif fault == "byte_fallback":
        # as vLLM streams: one chunk per token, byte-fallback tokens with empty text; chat opens with
        # a role chunk and (as OpenAI does) may close with an empty delta, neither carrying a token
        if kind == "chat":
            await send(
                {
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
                }
            )
        for i in range(n):
            await send(
                _chunk(kind, "" if i % 3 == 1 else f" w{i}", finish="length" if i == n - 1 and kind != "chat" else None)
            )
            await asyncio.sleep(0.005)
        if kind == "chat":
            await send(
                {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
            )
        await send(
            {
                "object": "text_completion",
                "choices": [],
                "usage": {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n},
            }
        )
    elif fault == "reasoning":
        for i in range(3):
            await send(_chunk("chat", "", reasoning=f" think{i}"))
            await asyncio.sleep(0.02)
        for i in range(n - 3):
            await send(_chunk("chat", f" answer{i}"))
            await asyncio.sleep(0.005)
    else:
        per = 3 if fault == "multi" else 1
        produced = 4 if fault == "early_stop" else n
        sent = 0
        while sent < produced:
            k = min(per, produced - sent)
            await send(
                _chunk(
                    kind,
                    "".join(f" w{sent + j}" for j in range(k)),
                    finish=("stop" if fault == "early_stop" else "length") if sent + k >= produced else None,
                )
            )
            sent += k
            await asyncio.sleep(0.005)
            if fault == "reset" and sent >= 2:
                sock = request.transport.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                request.transport.close()
                return resp
            if fault == "truncated" and sent >= 2:
                request.transport.close()
                return resp
            if fault == "hang" and sent >= 2:
                await asyncio.sleep(3600)
        if fault != "no_usage":
            reported = produced * 2 if fault == "mismatch" else produced
            await send(
                {
                    "object": "text_completion",
                    "choices": [],
                    "usage": {"prompt_tokens": 7, "completion_tokens": reported, "total_tokens": 7 + reported},
                }
            )
    await send("[DONE]")
    await resp.write_eof()
    return resp


async def _get(request: web.Request) -> web.Response:
    p = request.path
    if p == "/v1/models":
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm"}]})
    if p == "/version":
        return web.json_response({"version": "0.32.0"})  # as vLLM answers: a version, no name
    if p == "/metrics":
        return web.Response(text="requests_total 1\n")
    return web.Response(text="")


class ServerThread(ThreadedApp):
    """The misbehaving-server app on a free loopback port, from its own thread and loop."""

    def __init__(self, api_key: str | None = None):
        super().__init__()
        self.api_key = api_key

    def build(self) -> web.Application:
        app = web.Application()
        app[API_KEY] = self.api_key
        app.router.add_post("/v1/completions", _handle)
        app.router.add_post("/v1/chat/completions", _handle)
        for p in ("/health", "/v1/models", "/version", "/metrics"):
            app.router.add_get(p, _get)
        return app


@pytest.fixture(scope="module")
def faulty_server():
    with ServerThread(api_key="sekrit-key") as srv:
        yield srv


@pytest.fixture
def emulator(tmp_path):
    """Start the roofline emulator for a target (a subprocess, as the local provider runs it)."""
    procs = []

    def start(target: Target) -> str:
        d = tmp_path / f"emu{len(procs)}"
        d.mkdir()
        (d / "config.json").write_text(
            json.dumps({"mode": "roofline", "target": target.model_dump(mode="json"), "api_key_env": None})
        )
        cmd = [sys.executable, "-m", "bakeoff.serving.emulator", "--config", str(d / "config.json")]
        cmd += ["--host", "127.0.0.1", "--port", "0", "--port-file", str(d / "port")]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 30
        while not (d / "port").exists():
            assert procs[-1].poll() is None and time.monotonic() < deadline, "emulator did not start"
            time.sleep(0.05)
        return f"http://127.0.0.1:{int((d / 'port').read_text())}"

    yield start
    for p in procs:
        p.kill()
        p.wait()
