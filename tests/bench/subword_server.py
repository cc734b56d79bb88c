"""A server whose tokenizer is not one word per token, as real BPE tokenizers are not.

A word costs ceil(len / 3) tokens; a prompt adds one BOS token and a chat prompt a 5-token
template. Options switch off the /tokenize route or usage, or serve it as SGLang does (/v1/tokenize,
prompts only); output streams one whole word (one to
four tokens) per chunk, so the chunk and word counts both under-count output tokens, or with
``per_token`` one token (a word's next three letters) per chunk, as vLLM does.
"""

from __future__ import annotations

import asyncio
import json
import math

from aiohttp import web

from tests.bench.threaded_app import ThreadedApp

BOS, TEMPLATE = 1, 5
OUT_WORDS = ("consectetur", "lorem", "ipsum", "sit", "do")  # 4, 2, 2, 1, 1 tokens
OPTS = web.AppKey("opts", dict)


def word_tokens(w: str) -> int:
    return max(1, math.ceil(len(w) / 3))


def count(text: str, *, special: bool = True, chat: bool = False) -> int:
    return sum(word_tokens(w) for w in text.split()) + (BOS if special else 0) + (TEMPLATE if chat else 0)


def output_words(n: int) -> list[str]:
    """Words worth exactly n tokens."""
    out, have, i = [], 0, 0
    while have < n:
        w = OUT_WORDS[i % len(OUT_WORDS)]
        i += 1
        if have + word_tokens(w) > n:
            w = "do"
        out.append(w)
        have += word_tokens(w)
    return out


def _prompt(body: dict) -> tuple[str, bool]:
    if "messages" in body:
        return " ".join(str(m.get("content", "")) for m in body["messages"]), True
    return str(body["prompt"]), False


async def tokenize(request: web.Request) -> web.Response:
    opts = request.app[OPTS]
    if not opts["tokenize"] or request.path != opts["tokenize_path"]:
        return web.json_response({"detail": "Not Found"}, status=404)
    body = await request.json()
    if "messages" in body and not opts["chat_tokenize"]:  # SGLang's takes a prompt only
        return web.json_response({"detail": "prompt: field required"}, status=422)
    text, chat = _prompt(body)
    n = count(text, special=body.get("add_special_tokens", True), chat=chat)
    return web.json_response({"count": n, "max_model_len": 4096, "tokens": list(range(n))})


async def generate(request: web.Request) -> web.StreamResponse:
    opts = request.app[OPTS]
    body = await request.json()
    text, chat = _prompt(body)
    opts["prompts"].append(text)
    n_in, n = count(text, chat=chat), int(body.get("max_tokens") or 16)
    words = output_words(n)
    usage = {"prompt_tokens": n_in, "completion_tokens": n, "total_tokens": n_in + n}
    if not body.get("stream"):
        return web.json_response(
            {
                "object": "text_completion",
                "usage": usage if opts["usage"] else None,
                "choices": [{"index": 0, "text": " ".join(words), "finish_reason": "length"}],
            }
        )
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    pieces = [(" " if i else "") + w for i, w in enumerate(words)]
    if opts["per_token"]:
        pieces = [
            p[:4] if k == 0 and p.startswith(" ") else p[k : k + 3]
            for p in pieces
            for k in ([0] + list(range(4 if p.startswith(" ") else 3, len(p), 3)))
        ]
    for i, piece in enumerate(pieces):
        choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
        choice["finish_reason"] = "length" if i == len(pieces) - 1 else None
        await resp.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
        await asyncio.sleep(0.001)
    if opts["usage"]:
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "sub", "object": "model"}]})


class SubwordServer(ThreadedApp):
    """The app on a free loopback port, from its own thread; ``prompts`` lists what it was sent."""

    def __init__(
        self,
        *,
        tokenize: bool = True,
        usage: bool = True,
        per_token: bool = False,
        tokenize_path: str = "/tokenize",
        chat_tokenize: bool = True,
    ):
        super().__init__()
        self.opts = {
            "tokenize": tokenize,
            "usage": usage,
            "per_token": per_token,
            "prompts": [],
            "tokenize_path": tokenize_path,
            "chat_tokenize": chat_tokenize,
        }

    @property
    def prompts(self) -> list[str]:
        return self.opts["prompts"]

    def build(self) -> web.Application:
        app = web.Application()
        app[OPTS] = self.opts
        app.router.add_post("/tokenize", tokenize)
        app.router.add_post("/v1/tokenize", tokenize)
        app.router.add_post("/v1/completions", generate)
        app.router.add_post("/v1/chat/completions", generate)
        app.router.add_get("/v1/models", models)
        return app
