"""The roofline emulator's HTTP front end: vLLM's OpenAI-compatible routes on aiohttp.

aiohttp (on uvloop when installed) rather than a framework, because the streaming hot path must
stay a few microseconds per chunk: the emulator shares two cores with the benchmark client that
measures it. Routes: POST /v1/completions, /v1/chat/completions, /tokenize; GET /v1/models,
/health, /version, /metrics. When the config names an api_key_env that is set, every /v1 route needs
`Authorization: Bearer <key>` (as vLLM's --api-key); the key is never logged. /version and /metrics
are built here for both modes (scripted.py serves them from its own sockets). /metrics adds vLLM's
prefix-cache counters (and the host tier's, with kv_offload) and, with speculative decoding, its
spec-decode counters; /version's roofline summary gives the cache's block size and capacities and
the acceptance model. Each prompt is split into words once, for its token count and its cache keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import signal
import time
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric

from bakeoff import tokens
from bakeoff.plan.target import Target
from bakeoff.serving.emulator import VERSION, power, prefix_cache, speculation, sse, textgen
from bakeoff.serving.emulator.config import STOP_ROUTE, EmulatorConfig, opens_stop
from bakeoff.serving.emulator.engine import Rejected, RooflineEngine, Sequence, Stats
from bakeoff.twin.emulate import efficiency_info, emulator_roofline
from bakeoff.twin.roofline import Roofline

log = logging.getLogger("bakeoff.emulator")

CONFIG = web.AppKey("config", EmulatorConfig)
ENGINE = web.AppKey("engine", RooflineEngine)
KV_IN_HEADER = "X-Bakeoff-KV-Transferred"  # the router's decode hop: prompt tokens whose KV arrived
CHAT_DEFAULT_MAX_TOKENS = 256  # vLLM's default is "the rest of the context"; bounded here
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's completions default


async def until_stopped(expires_at: float | None) -> None:
    """Wait for SIGTERM or SIGINT, or the node's expiry (the emulated twin of a cloud node's shutdown
    timer): how the emulator and its disaggregated router both end."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if expires_at is not None:
        loop.call_later(max(0.0, expires_at - time.time()), stop.set)
    await stop.wait()


def stop_soon() -> None:
    """End this process as SIGTERM does (``until_stopped`` sees it), once the current reply is sent."""
    asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)


def stop_handler(key_env: str | None) -> Handler:
    """POST STOP_ROUTE with the stop key (from ``key_env``): teardown from a host that cannot signal
    this process (the emulator's, and a cluster router's)."""

    async def stop(request: web.Request) -> web.StreamResponse:
        opens = opens_stop(key_env, request.headers.get("Authorization", "").encode())
        if opens is None:
            return _error("not found", 404, "NotFoundError")
        if not opens:
            return _error(
                "Unauthorized: send the stop key as 'Authorization: Bearer <key>'", 401, "invalid_request_error"
            )
        stop_soon()
        return web.json_response({"stopping": True}, status=202)

    return stop


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, err_type: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status, self.err_type, self.param = status, err_type, param


def _error(
    message: str, status: int, err_type: str, param: str | None = None, code: int | str | None = None
) -> web.Response:
    return web.Response(
        status=status,
        body=sse.error_body(message, err_type, code if code is not None else status, param),
        content_type="application/json",
    )


def build_app(config: EmulatorConfig) -> web.Application:
    if config.target is None or config.mode != "roofline":
        raise ValueError("build_app serves mode 'roofline' with a target; mode 'scripted' is emulator.scripted")
    api_key = config.api_key()
    app = web.Application(middlewares=[_auth_middleware(api_key)] if api_key else [])
    app[CONFIG] = config
    app[ENGINE] = _engine(config)

    sampler = _power_sampler(config, app[ENGINE])

    async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
        app[ENGINE].start()
        if sampler:
            sampler.start()
        yield
        if sampler:
            await sampler.stop()
        await app[ENGINE].stop()

    app.cleanup_ctx.append(_lifecycle)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post(STOP_ROUTE, stop_handler(config.stop_key_env))
    _custom_routes(app, config.target)
    return app


def _custom_routes(app: web.Application, target: Target) -> None:
    """A custom stack's declared routes, served as well, so readiness and token counting are asked where the
    plan says (a route the emulator already serves is left as it is)."""
    c = target.custom
    if c is None:
        return
    taken = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    declared = [("GET", c.health_route, health), ("GET", c.readiness_route, models)]
    declared += [("POST", c.tokenize_route, tokenize)] if c.tokenize_route else []
    declared += [("GET", c.metrics_route, metrics)] if c.metrics_route else []
    for method, path, handler in declared:
        if path not in taken:
            app.router.add_route(method, path, handler)
            taken.add(path)


def _engine(config: EmulatorConfig) -> RooflineEngine:
    """The scheduler for the config's target, with its prefix cache and speculative decoding if it has them."""
    t = config.target
    assert t is not None  # build_app serves roofline targets only
    roofline = emulator_roofline(t)
    return RooflineEngine(
        roofline,
        config.time_scale,
        cache=prefix_cache.for_target(t, roofline.kv_bytes_per_token, roofline.kv_capacity_tokens),
        host_bytes_per_s=t.kv_offload.host_tbps * 1e12 if t.kv_offload else 0.0,
        speculation=speculation.for_target(t, config.seed),
    )


def _power_sampler(config: EmulatorConfig, engine: RooflineEngine) -> power.PowerSampler | None:
    """The power.csv writer when the config asks for one (roofline only: it needs the GPU and steps)."""
    t = config.target
    if not config.power_csv or t is None:  # validation allows power_csv only with a roofline target
        return None
    return power.PowerSampler(
        engine,
        config.power_csv,
        t.gpu.tdp_w,
        t.gpus_used,
        config.power_interval_s,
        vendor=t.gpu.vendor or "nvidia",
        time_scale=config.time_scale,
    )


def _auth_middleware(api_key: str) -> Middleware:
    expected = f"Bearer {api_key}".encode()

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/v1"):
            got = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(got, expected):
                return _error(
                    "Unauthorized: send the server's API key as 'Authorization: Bearer <key>'",
                    401,
                    "invalid_request_error",
                    code="invalid_api_key",
                )
        return await handler(request)

    return auth


# request parsing ------------------------------------------------------------
async def _body(request: web.Request, model: str) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest("request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    if body.get("model") not in (None, model):
        raise BadRequest(f"The model `{body.get('model')}` does not exist.", 404, "NotFoundError", "model")
    if (n := body.get("n", 1)) not in (1, None):
        raise BadRequest(f"n={n} is not supported by the emulator; send n=1", param="n")
    return body


def _int_field(body: dict[str, Any], name: str, default: int, minimum: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest(f"{name} must be an integer >= {minimum}, got {value!r}", param=name)
    return value


def _content_text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    raise BadRequest("messages[].content must be a string or a list of content parts", param="messages")


def _completion_prompt(body: dict[str, Any]) -> tuple[str, int, list[str]]:
    """(text, prompt tokens, the prompt's words): split once, for the count and the prefix cache."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        words = prompt.split()  # bakeoff.tokens' convention: one word, one token
        return prompt, len(words), words
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        words = list(map(str, prompt))  # token ids: one token each
        return " ".join(words), len(prompt), words
    raise BadRequest("prompt must be a string, a one-element list of strings, or a list of token ids", param="prompt")


# What a Llama 3 chat template adds around the messages, in tokens: <|begin_of_text|> once; per
# message <|start_header_id|>role<|end_header_id|>, the blank line and <|eot_id|>; and the
# generation prompt (the assistant header). A real server counts these in usage.prompt_tokens, so
# the emulator does too, and a client that sizes chat prompts must account for them.
CHAT_BEGIN_TOKENS, CHAT_PER_MESSAGE_TOKENS, CHAT_GENERATION_TOKENS = 1, 5, 4


def _chat_prompt(body: dict[str, Any]) -> tuple[str, int, list[str]]:
    """(the text replied to, prompt tokens with the template's, every message's words in order). The
    prefix cache keys on the words alone, so a prompt that only grows keeps its blocks."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequest("messages must be a non-empty list of {role, content} objects", param="messages")
    texts = [_content_text(m.get("content")) for m in messages]
    users = [t for m, t in zip(messages, texts, strict=True) if m.get("role") == "user"]
    template = CHAT_BEGIN_TOKENS + CHAT_PER_MESSAGE_TOKENS * len(messages) + CHAT_GENERATION_TOKENS
    words = texts[0].split() if len(texts) == 1 else " ".join(texts).split()
    return (users[-1] if users else texts[-1]), template + len(words), words


# handlers ---------------------------------------------------------------------
async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completion")


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat")


async def _generate(request: web.Request, kind: str) -> web.StreamResponse:
    arrival = time.monotonic()
    config: EmulatorConfig = request.app[CONFIG]
    engine = request.app[ENGINE]
    model = config.served_model
    try:
        body = await _body(request, model)
        text, prompt_tokens, words = (_chat_prompt if kind == "chat" else _completion_prompt)(body)
        default = CHAT_DEFAULT_MAX_TOKENS if kind == "chat" else COMPLETION_DEFAULT_MAX_TOKENS
        max_tokens = _int_field(body, "max_tokens", default, 1)
        if kind == "chat":
            max_tokens = _int_field(body, "max_completion_tokens", max_tokens, 1)
        min_tokens = _int_field(body, "min_tokens", 0, 0)
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise BadRequest('stream_options must be an object like {"include_usage": true}', param="stream_options")
        include_usage = bool(options.get("include_usage"))
        engine.check(prompt_tokens, max_tokens)
    except BadRequest as e:
        return _error(str(e), e.status, e.err_type, e.param)
    except Rejected as e:
        return _error(str(e), 400, "BadRequestError")
    reply = textgen.reply(
        text,
        max_tokens,
        seed=config.seed,
        ignore_eos=bool(body.get("ignore_eos")),
        min_tokens=min_tokens,
        error_rate=config.accuracy_error_rate,
    )
    seq = Sequence(prompt_tokens, len(reply.words), max_tokens, arrival=arrival)
    if request.headers.get(KV_IN_HEADER, "").isdigit():  # disaggregated: prefill ran on a prefill node
        seq.kv_in = min(int(request.headers[KV_IN_HEADER]), prompt_tokens)
    if engine.cache:
        seq.blocks = prefix_cache.block_keys(words, engine.cache.block_tokens)
    words = reply.words
    if not body.get("stream"):
        async with contextlib.aclosing(engine.stream(seq)) as ready:
            async for _ in ready:
                pass
        engine.stats.finished[reply.finish_reason] += 1
        build = sse.chat_body if kind == "chat" else sse.completion_body
        return web.Response(
            body=build(model, reply.text, reply.finish_reason, prompt_tokens, len(words)),
            content_type="application/json",
        )

    fmt = sse.StreamFormat(kind, model, include_usage=include_usage)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await resp.prepare(request)
    n, sent, pending = len(words), 0, fmt.first
    try:
        async with contextlib.aclosing(engine.stream(seq)) as ready:  # closing frees the slot at once
            async for new in ready:
                piece = "".join(words[sent : sent + new]) if new > 1 else words[sent]
                sent += new
                if sent < n:
                    await resp.write(pending + fmt.chunk(piece) if pending else fmt.chunk(piece))
                    pending = b""
                else:
                    tail = fmt.usage(prompt_tokens, n) if include_usage else b""
                    await resp.write(pending + fmt.last(piece, reply.finish_reason) + tail + sse.DONE)
        engine.stats.finished[reply.finish_reason] += 1
        await resp.write_eof()
    except ConnectionError:
        pass  # the client went away (counted by the engine); nothing to answer
    return resp


async def tokenize(request: web.Request) -> web.Response:
    """vLLM's POST /tokenize: {model, prompt} or {model, messages} -> {tokens, count, max_model_len},
    counted exactly as the generation routes count usage.prompt_tokens (one word, one token)."""
    config: EmulatorConfig = request.app[CONFIG]
    try:
        body = await _body(request, config.served_model)
        template = 0
        if "messages" in body:
            _, n, words = _chat_prompt(body)
            template = n - len(words)
        else:
            _, n, words = _completion_prompt(body)
    except BadRequest as e:
        return _error(str(e), e.status, e.err_type, e.param)
    ids = [TEMPLATE_TOKEN_ID] * template + [_token_id(w) for w in words]
    context = config.target.model_spec.context if config.target else None
    return web.json_response({"count": n, "max_model_len": context, "tokens": ids})


_IDS = {w: i + 100 for i, w in enumerate(tokens.VOCAB)}
TEMPLATE_TOKEN_ID = 1  # the chat template's special tokens, one id for all (ids below 100 are special)


def _token_id(word: str) -> int:
    """A stable id per word: the vocabulary's own, else a hash into a made-up range."""
    return _IDS.get(word) or 1000 + zlib.crc32(word.encode()) % 31000


async def models(request: web.Request) -> web.Response:
    config: EmulatorConfig = request.app[CONFIG]
    context = config.target.model_spec.context if config.target else None
    card = {
        "id": config.served_model,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "bakeoff-emulator",
        "root": config.served_model,
        "parent": None,
        "max_model_len": context,
    }
    return web.json_response({"object": "list", "data": [card]})


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


def version_info(
    config: EmulatorConfig, roofline: Roofline | None, engine: RooflineEngine | None = None
) -> dict[str, Any]:
    t = config.target
    info: dict[str, Any] = {
        "version": f"bakeoff-emulator-{VERSION}",
        "emulated": True,
        "mode": config.mode,
        "served_model": config.served_model,
        "time_scale": config.time_scale,
        "gpu": t.gpu.name if t else None,
        "gpus": t.tensor_parallel if t else None,
        "instance_type": t.instance_type if t else None,
        "model": t.model if t else None,
        "quantization": t.quantization if t else None,
        "kv_cache_dtype": t.kv_cache_dtype if t else None,
    }
    if roofline is not None and t is not None:  # a roofline always has its target
        info["roofline"] = roofline.summary() | (engine.summary() if engine else {})
        info["efficiency"] = efficiency_info(t)
    else:
        info["scripted"] = config.scripted.model_dump()
    if config.power_csv and t is not None:  # power_csv implies roofline, hence a target
        info["power"] = {
            "csv": config.power_csv,
            "interval_s": config.power_interval_s,
            "gpus": t.gpus_used,
            "tdp_w": t.gpu.tdp_w,
            "idle_w": power.watts(t.gpu.tdp_w, 0.0),
            "library": "amdsmi" if t.gpu.vendor == "amd" else "nvml",
            "figures": "EMULATED",
        }
    return info


async def version(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    return web.json_response(version_info(request.app[CONFIG], engine.roofline, engine))


class _Collector:
    """The server's counters, read at scrape time: no per-token bookkeeping beyond two ints."""

    def __init__(self, model: str, time_scale: float, running: int, waiting: int, kv_usage: float, stats: Stats):
        self.model, self.time_scale, self.stats = model, time_scale, stats
        self.running, self.waiting, self.kv_usage = running, waiting, kv_usage

    def collect(self) -> Iterator[Metric]:
        st, names, values = self.stats, ["model_name"], [self.model]
        G, C = GaugeMetricFamily, CounterMetricFamily
        for family, name, doc, value in (
            (G, "vllm:num_requests_running", "Number of requests in the running batch.", self.running),
            (G, "vllm:num_requests_waiting", "Number of requests waiting to be scheduled.", self.waiting),
            (G, "vllm:kv_cache_usage_perc", "KV-cache usage, 1 = full.", self.kv_usage),
            (G, "bakeoff_emulator_time_scale", "Factor every emulated delay is multiplied by.", self.time_scale),
            (C, "vllm:prompt_tokens", "Prefill tokens processed.", st.prompt_tokens),
            (C, "vllm:generation_tokens", "Generation tokens processed.", st.generation_tokens),
            (C, "bakeoff_emulator_emit_lateness_seconds", "Sum of (emitted - scheduled) over emissions.", st.late_s),
            (C, "bakeoff_emulator_emissions", "Scheduled emissions (steps, or scripted first chunks).", st.emissions),
            (G, "bakeoff_emulator_emit_lateness_max_seconds", "Worst emission lateness so far.", st.late_max_s),
            (C, "bakeoff_emulator_aborted_requests", "Streams the client closed before the end.", st.aborted),
        ):
            m = family(name, doc, labels=names)
            m.add_metric(values, value)
            yield m
        optional = (
            (st.speculative, "vllm:spec_decode_num_drafts", "Verification steps, one per sequence.", st.spec_drafts),
            (st.speculative, "vllm:spec_decode_num_draft_tokens", "Draft tokens proposed.", st.spec_draft_tokens),
            (st.speculative, "vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted.", st.spec_accepted_tokens),
            (
                st.prefix_cache,
                "vllm:prefix_cache_queries",
                "Prompt tokens looked up in the prefix cache.",
                st.prefix_queries,
            ),
            (st.prefix_cache, "vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", st.prefix_hits),
            (
                st.external_cache,
                "vllm:external_prefix_cache_queries",
                "Prompt tokens looked up in the host-memory KV tier.",
                st.external_queries,
            ),
            (
                st.external_cache,
                "vllm:external_prefix_cache_hits",
                "Prompt tokens found in the host-memory KV tier.",
                st.external_hits,
            ),
        )
        for enabled, name, doc, value in optional:  # exported only when the server has the feature, as vLLM
            if enabled:
                m = C(name, doc, labels=names)
                m.add_metric(values, value)
                yield m
        c = CounterMetricFamily(
            "vllm:request_success", "Finished requests by finish reason.", labels=names + ["finished_reason"]
        )
        for reason in ("stop", "length"):
            c.add_metric(values + [reason], st.finished[reason])
        yield c


def metrics_text(model: str, time_scale: float, running: int, waiting: int, kv_usage: float, stats: Stats) -> bytes:
    """Prometheus text with vLLM's metric names (and the emulator's own), as GET /metrics answers."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(model, time_scale, running, waiting, kv_usage, stats))
    return generate_latest(registry)


async def metrics(request: web.Request) -> web.Response:
    e, config = request.app[ENGINE], request.app[CONFIG]
    body = metrics_text(config.served_model, config.time_scale, len(e.running), len(e.waiting), e.kv_usage, e.stats)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
