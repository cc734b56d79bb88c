"""Building blocks for emulator tests: a target built from the catalog, and an in-process server on a free
loopback port, so most tests avoid process start-up."""

from __future__ import annotations

import contextlib
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from bakeoff.plan import Target
from bakeoff.serving.emulator import scripted
from bakeoff.serving.emulator.config import config_from_dict
from bakeoff.serving.emulator.server import build_app

MODEL_70B = "meta-llama/Llama-3.1-70B-Instruct"


def make_target(**kw: Any) -> Target:
    base = dict(
        name="mi355x-test",
        provider="local",
        instance_type="BM.GPU.MI355X.8",
        model="llama-3.1-70b",
        quantization="fp8",
        kv_cache_dtype="fp8",
        tensor_parallel=8,
    )
    emulator = kw.pop("emulator", {})
    return Target(**(base | kw), emulator=emulator)


def h100_8b(**kw: Any) -> Target:
    """One H100 serving Llama 3.1 8B in bf16: a small roofline whose figures are easy to check by hand."""
    return make_target(
        name="h100-8b",
        instance_type="p5.48xlarge",
        model="llama-3.1-8b",
        quantization="bf16",
        kv_cache_dtype="auto",
        tensor_parallel=1,
        **kw,
    )


def make_config(target: Target | None = None, **kw: Any) -> dict[str, Any]:
    t = target or make_target()
    return {"mode": "roofline", "target": t.model_dump(mode="json"), "api_key_env": None} | kw


@contextlib.asynccontextmanager
async def serve(config: dict[str, Any]):
    """Yield a session bound to an emulator started from config on 127.0.0.1:<free port>: the
    roofline app, or the scripted server (the two servers `python -m bakeoff.serving.emulator` runs)."""
    cfg = config_from_dict(config)
    if cfg.mode == "scripted":
        listener = scripted.serve(cfg, "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{listener.port}") as session:
                yield session
        finally:
            listener.close()
        return
    server = TestServer(build_app(cfg), host="127.0.0.1", port=0)
    await server.start_server()
    try:
        async with aiohttp.ClientSession(base_url=str(server.make_url("/"))) as session:
            yield session
    finally:
        await server.close()
