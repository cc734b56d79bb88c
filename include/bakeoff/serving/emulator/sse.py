"""Response bodies byte-compatible with vLLM's OpenAI server, streamed and not.

Streaming events are built from per-response templates serialised once, so a chunk costs two
byte concatenations: the emulator must not become the bottleneck of the client it is measuring.
Layout follows vLLM (compact JSON, pydantic field order):

  completions  data: {"id":"cmpl-..","object":"text_completion","created":..,"model":"..",
               "choices":[{"index":0,"text":"..","logprobs":null,"finish_reason":null,
               "stop_reason":null}]}
  chat         first  {... "object":"chat.completion.chunk" ... "choices":[{"index":0,
               "delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}
               then   {"index":0,"delta":{"content":".."},"logprobs":null,"finish_reason":null}
               last   {"index":0,"delta":{"content":".."},"logprobs":null,"finish_reason":"length",
               "stop_reason":null}

With stream_options.include_usage a final chunk with empty choices carries {"prompt_tokens",
"total_tokens","completion_tokens"}; content chunks have no "usage" key (vLLM 0.32 omits it).
Then data: [DONE].
Output text is built from bakeoff.tokens.VOCAB words and digits, which need no JSON escaping.
"""

from __future__ import annotations

import json
import time
import uuid

DONE = b"data: [DONE]\n\n"


def _dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


class StreamFormat:
    """The SSE events of one streamed response."""

    def __init__(
        self, kind: str, model: str, *, include_usage: bool, rid: str | None = None, created: int | None = None
    ):
        self.kind = kind
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
        head = _dumps(
            {
                "id": rid or new_id(kind),
                "object": obj,
                "created": int(time.time()) if created is None else created,
                "model": model,
            }
        )[:-1]
        self._head = "data: " + head
        tail = "}\n\n"
        if kind == "chat":
            self.first = (
                self._head + ',"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
                '"logprobs":null,"finish_reason":null}]' + tail
            ).encode()
            self._pre = (self._head + ',"choices":[{"index":0,"delta":{"content":"').encode()
            self._mid = ('"},"logprobs":null,"finish_reason":null}]' + tail).encode()
            self._end = '"},"logprobs":null,"finish_reason":"%s","stop_reason":null}]' + tail
        else:
            self.first = b""
            self._pre = (self._head + ',"choices":[{"index":0,"text":"').encode()
            self._mid = ('","logprobs":null,"finish_reason":null,"stop_reason":null}]' + tail).encode()
            self._end = '","logprobs":null,"finish_reason":"%s","stop_reason":null}]' + tail

    def chunk(self, text: str) -> bytes:
        return self._pre + text.encode() + self._mid

    def last(self, text: str, finish_reason: str) -> bytes:
        return self._pre + text.encode() + (self._end % finish_reason).encode()

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        return (
            self._head + ',"choices":[],"usage":' + _dumps(usage(prompt_tokens, completion_tokens)) + "}\n\n"
        ).encode()


def completion_body(model: str, text: str, finish_reason: str, prompt_tokens: int, completion_tokens: int) -> bytes:
    return _dumps(
        {
            "id": new_id("completion"),
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": finish_reason,
                    "stop_reason": None,
                    "prompt_logprobs": None,
                }
            ],
            "usage": {**usage(prompt_tokens, completion_tokens), "prompt_tokens_details": None},
        }
    ).encode()


def chat_body(model: str, text: str, finish_reason: str, prompt_tokens: int, completion_tokens: int) -> bytes:
    return _dumps(
        {
            "id": new_id("chat"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "tool_calls": []},
                    "logprobs": None,
                    "finish_reason": finish_reason,
                    "stop_reason": None,
                }
            ],
            "usage": {**usage(prompt_tokens, completion_tokens), "prompt_tokens_details": None},
            "prompt_logprobs": None,
        }
    ).encode()


def error_body(message: str, err_type: str, code: int | str, param: str | None = None) -> bytes:
    """OpenAI's error shape, as vLLM returns it."""
    return _dumps({"error": {"message": message, "type": err_type, "param": param, "code": code}}).encode()
