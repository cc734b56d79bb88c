"""A tiny OpenAI-compatible /v1/completions server on loopback for accuracy-gate tests.

It solves the last ``What is A op B?`` in the prompt, like the emulator, and answers wrongly for a
deterministic share of questions (chosen by a hash of the question, so the same items are wrong
on every run).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading

from aiohttp import web

from bakeoff.quality.evalset import QUESTION_RE, solve


def is_sabotaged(prompt: str, error_rate: float) -> bool:
    last = QUESTION_RE.findall(prompt)[-1]
    h = int(hashlib.sha256(repr(last).encode()).hexdigest()[:8], 16)
    return h < error_rate * 0x1_0000_0000


class FakeCompletions:
    """Runs in its own thread and event loop; use as a context manager."""

    def __init__(self, error_rate: float = 0.0, api_key: str | None = None, verbose: bool = False):
        self.error_rate, self.api_key, self.verbose = error_rate, api_key, verbose
        self.requests: list[dict] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _completions(self, request: web.Request) -> web.Response:
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"error": "unauthorized"}, status=401)
        body = await request.json()
        self.requests.append(body)
        answer = solve(body["prompt"])
        if is_sabotaged(body["prompt"], self.error_rate):
            answer += 1
        text = f" {answer}" + (" because I added the numbers" if self.verbose else "")
        return web.json_response(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "model": body["model"],
                "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
                "usage": {
                    "prompt_tokens": len(body["prompt"].split()),
                    "completion_tokens": len(text.split()),
                    "total_tokens": 0,
                },
            }
        )

    async def _start(self) -> int:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]

    def __enter__(self) -> FakeCompletions:
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        self.base_url = f"http://127.0.0.1:{self.port}"
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
