"""The disaggregated front of an emulated cluster: an OpenAI-compatible router over prefill and decode nodes.

``python -m bakeoff.serving.emulator.router --config ROUTER.json --port 0 --port-file F``

Each generation request goes to a prefill node (round robin) as a one-token, non-streaming request,
so that node's roofline times the prompt's prefill under its own load; the router then waits the KV
transfer time the modelled interconnect gives (``kv_s_per_token`` x prompt tokens: NVLink inside a
rack, the GPUs' scale-out NICs between nodes; bakeoff.clusters.cluster.kv_seconds_per_token, after
serving.emulator.disagg), and sends the request to the decode node with the fewest requests in
flight with ``X-Bakeoff-KV-Transferred`` set, so the decode node prefills nothing and streams the
output. The decode node's stream is relayed byte for byte: the benchmark client reads exactly what a
single emulator sends. /health is 200 only when every node answers; otherwise 503 naming the role and
node that did not. /v1/models, /version and /metrics are the first decode node's. Every figure is
EMULATED; the router's own time is not modelled beyond what it costs here.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from bakeoff import durable
from bakeoff.core.pinning import pinned_context
from bakeoff.serving.emulator.config import STOP_ROUTE
from bakeoff.serving.emulator.server import KV_IN_HEADER, stop_handler, until_stopped

log = logging.getLogger("bakeoff.emulator.router")


class RouterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prefill: list[str] = Field(min_length=1, description="prefill nodes' base URLs")
    decode: list[str] = Field(min_length=1, description="decode nodes' base URLs")
    kv_s_per_token: float = Field(0.0, ge=0, description="KV transfer seconds per prompt token (emulated time)")
    time_scale: float = Field(1.0, gt=0, description="multiplies the KV wait, as the nodes multiply their delays")
    expires_at: float | None = Field(None, description="epoch seconds; the router exits by itself then")
    tls_cert: str | None = Field(None, description="the nodes' pinned certificate (PEM) when they serve https")
    stop_key_env: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description=f"environment variable whose key opens {STOP_ROUTE}"
    )


NODE_READ_TIMEOUT_S = 300.0  # the longest a node may be silent mid-answer (a workload's default request timeout)
CONFIG = web.AppKey("router_config", RouterConfig)
SESSION = web.AppKey("session", aiohttp.ClientSession)
STATE = web.AppKey("state", dict)


def build_app(config: RouterConfig) -> web.Application:
    app = web.Application()
    app[CONFIG] = config
    app[STATE] = {"prefill": itertools.cycle(config.prefill), "inflight": dict.fromkeys(config.decode, 0)}

    async def _session(app: web.Application) -> AsyncIterator[None]:
        # nodes booted with a per-node certificate (a sandbox cloud) are reached over it, pinned
        pinned = pinned_context(config.tls_cert) if config.tls_cert else None
        app[SESSION] = aiohttp.ClientSession(
            # no total (a decode stream lasts as long as its output), but a node that stops sending is given up on
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=NODE_READ_TIMEOUT_S),
            connector=aiohttp.TCPConnector(ssl=pinned) if pinned else None,
        )
        yield
        await app[SESSION].close()

    app.cleanup_ctx.append(_session)
    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/chat/completions", generate)
    app.router.add_get("/health", health)
    app.router.add_post(STOP_ROUTE, stop_handler(config.stop_key_env))
    for path in ("/v1/models", "/version", "/metrics"):
        app.router.add_get(path, first_decode)
    return app


def _auth(request: web.Request) -> dict[str, str]:
    got = request.headers.get("Authorization")
    return {"Authorization": got} if got else {}


async def generate(request: web.Request) -> web.StreamResponse:
    cfg, state, session = request.app[CONFIG], request.app[STATE], request.app[SESSION]
    raw = await request.read()
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return web.json_response({"error": {"message": "body is not JSON", "code": 400}}, status=400)
    if not isinstance(body, dict):
        return web.json_response({"error": {"message": "body must be a JSON object", "code": 400}}, status=400)
    headers = _auth(request) | {"Content-Type": "application/json"}
    prefill_body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    prefill_body.update(max_tokens=1, min_tokens=0)
    prefill_body.pop("max_completion_tokens", None)
    node = next(state["prefill"])
    try:
        async with session.post(f"{node}{request.path}", json=prefill_body, headers=headers) as r:
            answer = await r.read()
            status = r.status
    except (TimeoutError, aiohttp.ClientError) as e:  # named to the client, not a bare 500
        msg = f"prefill node {node} did not answer: {type(e).__name__}"
        return web.json_response({"error": {"message": msg, "code": 502}}, status=502)
    if status != 200:  # the client sees the prefill node's own refusal (context too long, key)
        return web.Response(status=status, body=answer, content_type="application/json")
    prompt_tokens = int((json.loads(answer).get("usage") or {}).get("prompt_tokens") or 0)
    await asyncio.sleep(prompt_tokens * cfg.kv_s_per_token * cfg.time_scale)
    inflight: dict[str, int] = state["inflight"]
    decode = min(inflight, key=inflight.__getitem__)
    inflight[decode] += 1
    try:
        async with session.post(
            f"{decode}{request.path}", data=raw, headers=headers | {KV_IN_HEADER: str(prompt_tokens)}
        ) as r:
            resp = web.StreamResponse(status=r.status, headers={"Content-Type": r.headers.get("Content-Type", "")})
            await resp.prepare(request)
            async for chunk in r.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp
    finally:
        inflight[decode] -= 1


async def health(request: web.Request) -> web.Response:
    cfg, session = request.app[CONFIG], request.app[SESSION]
    nodes = [("prefill", i, u) for i, u in enumerate(cfg.prefill)]
    nodes += [("decode", i, u) for i, u in enumerate(cfg.decode)]
    down = []
    for role, i, url in nodes:
        try:
            async with session.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=2)) as r:
                if r.status != 200:
                    down.append(f"{role} {i} ({r.status})")
        except (TimeoutError, aiohttp.ClientError) as e:
            down.append(f"{role} {i} ({type(e).__name__})")
    if down:
        return web.json_response({"error": {"message": f"not serving: {', '.join(down)}", "code": 503}}, status=503)
    return web.Response(status=200)


async def first_decode(request: web.Request) -> web.Response:
    cfg, session = request.app[CONFIG], request.app[SESSION]
    async with session.get(f"{cfg.decode[0]}{request.path}", headers=_auth(request)) as r:
        ctype = r.headers.get("Content-Type", "application/json")
        return web.Response(status=r.status, body=await r.read(), headers={"Content-Type": ctype})


async def serve(config: RouterConfig, host: str, port: int, port_file: Path | None) -> None:
    runner = web.AppRunner(build_app(config), access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True)
    await site.start()
    bound = runner.addresses[0][1]
    if port_file:
        durable.write_atomic(port_file, f"{bound}\n".encode())
    log.info("router on %s:%s: %d prefill, %d decode nodes", host, bound, len(config.prefill), len(config.decode))
    await until_stopped(config.expires_at)
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bakeoff.serving.emulator.router", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, type=Path)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", type=Path)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = RouterConfig.model_validate(json.loads(args.config.read_text()))
    except (OSError, ValueError) as e:
        print(f"error: --config: {e}", file=sys.stderr)
        return 2
    asyncio.run(serve(config, args.host, args.port, args.port_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
