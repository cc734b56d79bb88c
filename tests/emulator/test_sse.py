"""Streamed and non-streamed bodies match vLLM's OpenAI server byte for byte (ids and timestamps aside)."""

from __future__ import annotations

import json
import re

import pytest
from emulator_fixtures import MODEL_70B, make_config, serve

from bakeoff.serving.emulator import sse
from bakeoff.tokens import VOCAB

M = MODEL_70B
ID_CREATED = re.compile(rb'"id":"(chatcmpl|cmpl)-[0-9a-f]{32}","object":"([a-z_.]+)","created":\d+,')


def normalise(raw: bytes) -> bytes:
    """Replace the random id and the clock with fixed values; check both are stable within a response."""
    ids = set(re.findall(rb'"id":"([^"]+)"', raw))
    assert len(ids) == 1, f"one id per response, got {ids}"
    return ID_CREATED.sub(rb'"id":"\1-ID","object":"\2","created":0,', raw)


def completion_chunk(text: str, finish: str | None, usage: bool) -> str:
    fr = "null" if finish is None else f'"{finish}"'
    return (
        'data: {"id":"cmpl-ID","object":"text_completion","created":0,"model":"' + M + '","choices":[{"index":0,'
        f'"text":"{text}","logprobs":null,"finish_reason":{fr},"stop_reason":null}}]' + "}\n\n"
    )  # no "usage" key on content chunks, with or without include_usage (vLLM 0.32)


def chat_chunk(delta: str, finish: str | None, usage: bool) -> str:
    tail = ',"stop_reason":null' if finish else ""
    fr = "null" if finish is None else f'"{finish}"'
    return (
        'data: {"id":"chatcmpl-ID","object":"chat.completion.chunk","created":0,"model":"'
        + M
        + '","choices":[{"index":0,'
        f'"delta":{delta},"logprobs":null,"finish_reason":{fr}{tail}}}]' + "}\n\n"
    )


@pytest.mark.parametrize("include_usage", [False, True])
def test_completions_stream_bytes(run, include_usage):
    body = {"model": M, "prompt": "Q: What is 2 + 3? A:", "max_tokens": 3, "ignore_eos": True, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}

    async def go():
        async with serve(make_config()) as s:
            r = await s.post("/v1/completions", json=body)
            assert r.status == 200
            assert r.headers["Content-Type"] == "text/event-stream; charset=utf-8"
            return await r.read()

    expected = (
        completion_chunk(" 5", None, include_usage)
        + completion_chunk(" charlie", None, include_usage)
        + completion_chunk(" romeo", "length", include_usage)
    )
    if include_usage:
        expected += (
            'data: {"id":"cmpl-ID","object":"text_completion","created":0,"model":"' + M + '","choices":[],'
            '"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3}}\n\n'
        )
    expected += "data: [DONE]\n\n"
    assert normalise(run(go())).decode() == expected


@pytest.mark.parametrize("include_usage", [False, True])
def test_chat_stream_bytes(run, include_usage):
    body = {
        "model": M,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 7 * -6?"}],
        "max_tokens": 2,
        "ignore_eos": True,
        "stream": True,
    }
    if include_usage:
        body["stream_options"] = {"include_usage": True}

    async def go():
        async with serve(make_config()) as s:
            r = await s.post("/v1/chat/completions", json=body)
            assert r.status == 200
            return await r.read()

    expected = (
        chat_chunk('{"role":"assistant","content":""}', None, include_usage)
        + chat_chunk('{"content":" -42"}', None, include_usage)
        + chat_chunk('{"content":" oscar"}', "length", include_usage)
    )
    if include_usage:  # prompt tokens: every message's words (2 + 5) and the chat template (1 + 2 x 5 + 4)
        expected += (
            'data: {"id":"chatcmpl-ID","object":"chat.completion.chunk","created":0,"model":"' + M + '",'
            '"choices":[],"usage":{"prompt_tokens":22,"total_tokens":24,"completion_tokens":2}}\n\n'
        )
    expected += "data: [DONE]\n\n"
    assert normalise(run(go())).decode() == expected


def test_non_streaming_bodies(run):
    async def go():
        async with serve(make_config()) as s:
            c = await (
                await s.post(
                    "/v1/completions", json={"model": M, "prompt": "a b c d", "max_tokens": 6, "ignore_eos": True}
                )
            ).json()
            ch = await (
                await s.post(
                    "/v1/chat/completions",
                    json={
                        "model": M,
                        "max_tokens": 4,
                        "ignore_eos": True,
                        "messages": [{"role": "user", "content": "x y z"}],
                    },
                )
            ).json()
            return c, ch

    c, ch = run(go())
    assert list(c) == ["id", "object", "created", "model", "choices", "usage"]
    assert c["object"] == "text_completion" and c["id"].startswith("cmpl-") and c["model"] == M
    assert c["choices"][0]["finish_reason"] == "length" and c["choices"][0]["stop_reason"] is None
    assert len(c["choices"][0]["text"].split()) == 6
    assert c["usage"] == {"prompt_tokens": 4, "total_tokens": 10, "completion_tokens": 6, "prompt_tokens_details": None}
    assert ch["object"] == "chat.completion" and ch["id"].startswith("chatcmpl-")
    msg = ch["choices"][0]["message"]
    assert msg["role"] == "assistant" and len(msg["content"].split()) == 4
    assert ch["usage"]["prompt_tokens"] == 3 + 1 + 5 + 4 and ch["usage"]["completion_tokens"] == 4  # words + template


def test_streamed_text_equals_non_streamed(run):
    body = {"model": M, "prompt": "the same prompt twice", "max_tokens": 12}

    async def go():
        async with serve(make_config()) as s:
            whole = await (await s.post("/v1/completions", json=body)).json()
            raw = await (await s.post("/v1/completions", json=body | {"stream": True})).read()
            return whole, raw

    whole, raw = run(go())
    events = [json.loads(line[6:]) for line in raw.decode().split("\n\n") if line and line != "data: [DONE]"]
    assert "".join(e["choices"][0]["text"] for e in events) == whole["choices"][0]["text"]
    assert events[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]


def test_vocabulary_needs_no_json_escaping():
    # the chunk templates splice text in unescaped; this is what makes that safe
    for w in VOCAB + ["-42", "7"]:
        assert json.dumps(" " + w)[1:-1] == " " + w


def test_error_body_shape():
    assert json.loads(sse.error_body("bad", "BadRequestError", 400, "prompt")) == {
        "error": {"message": "bad", "type": "BadRequestError", "param": "prompt", "code": 400}
    }
