"""Counting tokens as the served model does, so prompt lengths and output counts are the server's.

Routes, best first (``discover`` picks the first that answers):
- ``tokenize``: the engine's own tokenizer over HTTP. vLLM serves ``POST /tokenize`` ({model, prompt}
  or {model, messages} with the chat template applied) and SGLang ``POST /v1/tokenize`` ({model,
  prompt}); both answer {tokens, count, max_model_len}. The emulator serves the same route.
- ``usage-probe``: a one-token, non-streamed request whose ``usage.prompt_tokens`` is the count
  (prompts only: a probe cannot count text the model did not receive as a prompt).
- ``words``: the emulator's convention (one word, one token); only when the server answers neither,
  and recorded as such, since against a real tokenizer it is an approximation.

The API key is sent, never logged or returned.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from typing import Any

import httpx

from bakeoff import tokens
from bakeoff.bench.metrics.records import RequestRecord
from bakeoff.core.endpoint import Endpoint
from bakeoff.serving import egress

log = logging.getLogger(__name__)

TOKENIZE_PATHS = ("/tokenize", "/v1/tokenize")


class TokenizeError(RuntimeError):
    """A counting route failed (status or body); callers fall back to the next route."""


class TokenCounter:
    """Counts tokens of one endpoint's model. Picklable (the HTTP client is reopened on use), so a
    worker process can carry it."""

    method = "words"

    def __init__(
        self,
        base_url: str = "",
        model: str = "",
        api_key: str | None = None,
        verify: ssl.SSLContext | str | bool = True,
        timeout_s: float = 30.0,
    ):
        self.base_url, self.model, self.api_key = base_url.rstrip("/"), model, api_key
        self.verify, self.timeout_s = verify, timeout_s
        self._client: httpx.Client | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def http(self) -> httpx.Client:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = egress.client(
                base_url=self.base_url, headers=headers, timeout=self.timeout_s, verify=self.verify
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = self.http().post(path, json=body)
        except httpx.HTTPError as e:
            raise TokenizeError(f"POST {path}: {type(e).__name__}") from None
        if r.status_code != 200:
            raise TokenizeError(f"POST {path}: HTTP {r.status_code}")
        try:
            doc = r.json()
        except ValueError:
            raise TokenizeError(f"POST {path}: the answer is not JSON") from None
        if not isinstance(doc, dict):
            raise TokenizeError(f"POST {path}: the answer is not a JSON object")
        return doc

    def count(self, text: str, *, chat: bool = False, special: bool = True) -> int:
        """Tokens of ``text`` sent as a prompt (``chat``: as the one user message, template included;
        ``special``: with the BOS and other special tokens the server adds to a prompt)."""
        return tokens.count(text)

    def can_count_output(self) -> bool:
        return True


class EndpointCounter(TokenCounter):
    """The engine's own /tokenize route (``path``)."""

    method = "tokenize"

    def __init__(self, *args: Any, path: str = "/tokenize", **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.path = path

    def count(self, text: str, *, chat: bool = False, special: bool = True) -> int:
        body: dict[str, Any] = {"model": self.model, "add_special_tokens": special}
        if chat:
            body.update(messages=[{"role": "user", "content": text}], add_generation_prompt=True)
        else:
            body["prompt"] = text
        doc = self._post(self.path, body)
        n = doc.get("count")
        if not isinstance(n, int) or isinstance(n, bool):
            toks = doc.get("tokens")
            if not isinstance(toks, list):
                raise TokenizeError(f"POST {self.path}: the answer has neither 'count' nor 'tokens'")
            n = len(toks)
        return n


class ProbeCounter(TokenCounter):
    """A one-token request per count: slow, so only prompt sizing (a few dozen calls) uses it."""

    method = "usage-probe"

    def count(self, text: str, *, chat: bool = False, special: bool = True) -> int:
        body: dict[str, Any] = {"model": self.model, "max_tokens": 1, "temperature": 0, "stream": False}
        if chat:
            path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": text}]
        else:
            path, body["prompt"] = "/v1/completions", text
        usage = self._post(path, body).get("usage") or {}
        n = usage.get("prompt_tokens")
        if not isinstance(n, int) or isinstance(n, bool):
            raise TokenizeError(f"POST {path}: the answer reports no usage.prompt_tokens")
        return n

    def can_count_output(self) -> bool:
        return False


def discover(endpoint: Endpoint, api_key: str | None, *, chat: bool = False, timeout_s: float = 10.0) -> TokenCounter:
    """The best counting route ``endpoint`` (an Endpoint) answers; never raises. A route counts only
    if it answers a one-word probe with a positive count."""
    common: dict[str, Any] = dict(
        base_url=endpoint.base_url,
        model=endpoint.model,
        api_key=api_key,
        timeout_s=timeout_s,
        verify=endpoint.verify() if hasattr(endpoint, "verify") else True,
    )
    # a custom stack's declared route, or none (None); "" for a built-in engine: both of theirs
    declared = endpoint.route("tokenize", "") if hasattr(endpoint, "route") else ""
    paths = TOKENIZE_PATHS if declared == "" else ((declared,) if declared else ())
    candidates: list[TokenCounter] = [EndpointCounter(path=p, **common) for p in paths]
    candidates.append(ProbeCounter(**common))
    for c in candidates:
        try:
            if c.count("hello", chat=chat) > 0:
                return c
        except TokenizeError as e:
            log.debug("token counting route %s unavailable: %s", c.method, e)
        c.close()
    log.warning(
        "%s answers neither /tokenize nor usage: prompt lengths are counted in words, which a real "
        "tokenizer does not follow",
        endpoint.base_url,
    )
    return TokenCounter()


PIECES_SAMPLED = 16


def one_token_per_chunk(records: Sequence[RequestRecord], counter: TokenCounter) -> bool:
    """Whether this server streams one token per chunk (vLLM's and SGLang's default): most of a
    sample of chunk texts are one token each. Then the chunk count is exact, while re-tokenizing the
    whole text is not (a model's output need not be the canonical tokenization of its text)."""
    pieces: list[str] = []
    for r in records:
        pieces += [p for p in r.output_pieces or [] if p.strip()]
        if len(pieces) >= PIECES_SAMPLED:
            break
    sample = pieces[:PIECES_SAMPLED]
    if not sample:
        return True
    return sum(1 for p in sample if counter.count(p, special=False) <= 1) >= 0.75 * len(sample)


def recount_outputs(records: Sequence[RequestRecord], counter: TokenCounter | None) -> int:
    """Count the output tokens of requests the server gave no usage for with the model's own
    tokenizer: the chunk count when the server streams one token per chunk (checked on a sample,
    method "chunks"), else the tokenized text (method "tokenize"), never below the chunk count (every
    token chunk carries at least one token). Returns how many requests were recounted."""
    todo = [r for r in records if r.tokens_source == "client" and r.output_pieces is not None]
    if not todo or counter is None or not counter.can_count_output() or counter.method == "words":
        return 0
    try:
        if one_token_per_chunk(todo, counter):
            for r in todo:
                r.output_tokens = r.output_tokens_client = r.chunks
                r.client_count_method = "chunks"
            return len(todo)
        for r in todo:
            text = "".join(r.output_pieces or ())
            r.output_tokens = r.output_tokens_client = max(r.chunks, counter.count(text, special=False) if text else 0)
            r.client_count_method = "tokenize"
    except TokenizeError as e:
        log.warning("output tokens could not be tokenized (%s); kept the client's own count", e)
        return 0
    return len(todo)
