"""OpenAI-style SSE stream accounting: which chunk carried text, reasoning, usage, finish, errors.

Kept separate from the transport so the same rules apply whichever HTTP client feeds it. Work per
chunk is kept tiny (one JSON decode, a few dict lookups); token counting happens once per request.
"""

from __future__ import annotations

import json
from typing import Any

from bakeoff import tokens

_loads = json.loads


class StreamError(Exception):
    """A response that cannot be accounted for; ``kind`` becomes the request's error_kind."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind


class StreamState:
    """Accumulates one streamed response. Feed raw body bytes with the arrival time of the read."""

    __slots__ = (
        "t_send",
        "buf",
        "ttft",
        "ttfa",
        "offsets",
        "answer",
        "reasoning",
        "usage",
        "finish_reason",
        "done",
        "empty_choices",
        "events",
        "error",
    )

    def __init__(self, t_send: float):
        self.t_send = t_send
        self.buf = b""
        self.ttft: float | None = None
        self.ttfa: float | None = None
        self.offsets: list[float] = []
        self.answer: list[str] = []
        self.reasoning: list[str] = []
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.done = False
        self.empty_choices = 0
        self.events = 0
        self.error: StreamError | None = None

    def feed(self, data: bytes, now: float) -> None:
        buf = self.buf + data if self.buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            self._event(buf[start:end], now)
            start = end + 2
        self.buf = buf[start:]

    def _event(self, raw: bytes, now: float) -> None:
        for line in raw.split(b"\n"):
            if not line.startswith(b"data:"):
                continue  # comments (": keep-alive"), event:/id: lines
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                return
            if self.done:
                self.error = self.error or StreamError("malformed_sse", "data after [DONE]")
                return
            try:
                obj = _loads(payload)
            except ValueError:
                self.error = self.error or StreamError("malformed_sse", f"undecodable event: {payload[:80]!r}")
                return
            if not isinstance(obj, dict):
                self.error = self.error or StreamError("malformed_sse", f"event is not an object: {payload[:80]!r}")
                return
            self.events += 1
            self._chunk(obj, now)

    def _chunk(self, obj: dict[str, Any], now: float) -> None:
        if "error" in obj or obj.get("object") == "error":
            err = obj.get("error", obj)
            msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            self.error = self.error or StreamError("server_error", f"error event: {msg[:200]}")
            return
        usage = obj.get("usage")
        if usage:
            self.usage = usage
        choices = obj.get("choices")
        if not choices:
            if not usage:
                self.empty_choices += 1
            return
        c = choices[0]
        delta = c.get("delta")
        if isinstance(delta, dict):  # chat
            text = delta.get("content") or ""
            think = delta.get("reasoning_content") or delta.get("reasoning") or ""
            # a token chunk names its content even when empty; the opening {"role": ..,
            # "content": ""} and a closing {} carry no token
            token = bool(text or think) or (
                "role" not in delta
                and any(isinstance(delta.get(k), str) for k in ("content", "reasoning_content", "reasoning"))
            )
        else:  # completions
            text = c.get("text") or ""
            think = ""
            token = isinstance(c.get("text"), str)
        if token:  # an empty-text chunk is still a token (vLLM's byte-fallback tokens, EOS)
            off = now - self.t_send
            self.offsets.append(off)
            if self.ttft is None:
                self.ttft = off
            if text:
                self.answer.append(text)
                if self.ttfa is None:
                    self.ttfa = off
            if think:
                self.reasoning.append(think)
        fr = c.get("finish_reason")
        if fr:
            self.finish_reason = fr

    # --- after the stream ended -------------------------------------------------------------
    def client_count(self) -> tuple[int, str]:
        """Client-side output token count and how it was made: the larger of the token-chunk count
        ("chunks", empty-text chunks included) and the whitespace-word count ("words", text joined
        first, so a word split over chunks counts once). Exact under the emulator's convention (one
        word = one token) and for servers that stream one token per chunk (vLLM, SGLang defaults);
        a lower bound otherwise."""
        words = tokens.count("".join(self.reasoning)) + tokens.count("".join(self.answer))
        chunks = len(self.offsets)
        return (chunks, "chunks") if chunks >= words else (words, "words")

    def client_tokens(self) -> int:
        return self.client_count()[0]

    def verdict(self) -> StreamError | None:
        """Why this stream is not a valid completed response, or None."""
        if self.error:
            return self.error
        if self.buf.strip():
            return StreamError("truncated", f"stream ended inside an event: {self.buf[:80]!r}")
        if not self.done:
            return StreamError("truncated", "stream ended without data: [DONE]")
        if not (self.answer or self.reasoning):
            if self.empty_choices:
                return StreamError("empty_choices", f"{self.empty_choices} chunk(s) with no choices and no text")
            return StreamError("no_output", "stream finished without any generated text")
        return None
