"""The scripted server as its users start it (``ScriptedServerProcess``, i.e. the emulator's command
line): https with a pinned node certificate keeps the script's timing, /v1 needs the key as vLLM's
--api-key does, and /version, /metrics, /stats describe what it served."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from bakeoff.bench.client.transport import StreamingClient
from bakeoff.core import pinning
from bakeoff.serving import tls
from bakeoff.serving.emulator.scripted import ScriptedServerProcess

KEY = "bk-" + "5" * 40


@pytest.fixture(scope="module")
def https_server(tmp_path_factory):
    ident = tls.node_identity("run-scripted", "scripted-node")
    d = tmp_path_factory.mktemp("tls")
    (d / "node.crt").write_text(ident.cert_pem)
    (d / "node.key").write_text(ident.key_pem)
    script = {"ttft_ms": 40, "itl_ms": 4, "tokens_per_chunk": 2}
    with ScriptedServerProcess(
        script, served_model="m", api_key=KEY, tls=(str(d / "node.crt"), str(d / "node.key"))
    ) as s:
        yield s, ident.cert_pem


def test_https_stream_keeps_the_script(https_server):
    srv, cert = https_server
    assert srv.url.startswith("https://")

    async def one():
        c = StreamingClient(srv.url, api_key=KEY, timeout_s=10, tls_cert=cert)
        try:
            await c.warm(1)  # connection set-up is never inside a TTFT
            body = {"model": "m", "prompt": "a b c", "max_tokens": 21, "stream": True}
            return await c.stream(c.build("/v1/completions", body | {"stream_options": {"include_usage": True}}))
        finally:
            await c.close()

    out = asyncio.run(one())
    assert out.error is None and out.status == 200
    assert out.state.usage["completion_tokens"] == 21 and out.state.usage["prompt_tokens"] == 3
    # The script is a floor the emulator may never beat; the ceilings only catch a script ignored
    # wholesale, with room for a loaded 2-core machine's scheduling (seen at 0.2 s once under load 4).
    assert 0.040 <= out.state.ttft <= 0.5  # 40 ms from the kernel's receive time
    # 11 chunks of up to 2 tokens, 2 x 4 ms apart: the last one 10 x 8 = 80 ms after the first
    assert 0.075 <= out.t_end - out.t_send - out.state.ttft <= 0.8


def test_key_guards_v1_only_and_the_server_describes_itself(https_server):
    srv, cert = https_server
    with httpx.Client(base_url=srv.url, verify=pinning.client_context(srv.url, cert), timeout=5) as c:
        assert c.get("/health").status_code == 200
        assert c.get("/v1/models").status_code == 401
        assert c.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        models = c.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).json()
        version = c.get("/version").json()
        metrics = c.get("/metrics").text
        stats = c.get("/stats").json()
    assert [m["id"] for m in models["data"]] == ["m"]
    assert version["emulated"] is True and version["mode"] == "scripted"
    assert version["scripted"]["tokens_per_chunk"] == 2 and version["served_model"] == "m"
    assert 'vllm:num_requests_running{model_name="m"} 0.0' in metrics.splitlines()
    assert stats["requests"] >= 1 and stats["first_chunk_late_ms_max"] is not None
    with pytest.raises(httpx.HTTPError):  # https only: clear text is not answered
        httpx.get(srv.url.replace("https", "http") + "/health", timeout=3)
