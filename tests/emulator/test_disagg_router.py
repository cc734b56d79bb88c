"""A disaggregated emulated cluster end to end: two local nodes (prefill, decode), the router in front,
a streamed completion through it; the prefill node prefills, the decode node only decodes, and the
KV transfer time is in the TTFT."""

from __future__ import annotations

import os
import re
import time
import uuid

import httpx
import pytest

from bakeoff.clusters import cluster
from bakeoff.plan import Target
from bakeoff.providers.base import ProviderError
from bakeoff.providers.local import LocalProvider

KEY = "bk-" + "0" * 40


def prompt_tokens_counter(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    m = re.search(r"^vllm:prompt_tokens_total\{[^}]*\} ([0-9.e+]+)$", text, re.M)
    assert m, text[:500]
    return float(m.group(1))


@pytest.fixture
def served(tmp_path, monkeypatch):
    monkeypatch.setenv("BAKEOFF_LOCAL_STATE", str(tmp_path / "local"))
    t = Target(
        name="b200 disagg",
        provider="local",
        instance_type="BM.GPU.B200.8",
        model="llama-3.1-8b",
        quantization="fp8",
        cluster={"nodes": 2, "prefill": {"tp": 8}, "decode": {"tp": 8}, "kv_transfer": "nixl"},
    )
    p, rid = LocalProvider(grace_s=1.0), f"r-{uuid.uuid4().hex[:8]}"
    res = cluster.provision(p, t, rid, tags={}, spec={"api_key": KEY, "expires_at": time.time() + 300}, deadline_s=60)
    router = cluster.start_router(res, t, tmp_path / "router", expires_at=time.time() + 300)
    yield t, p, res, router
    router.stop()
    cluster.release(p, rid, res, {})


@pytest.mark.slow
def test_a_request_prefills_on_one_node_and_decodes_on_the_other(served):
    t, p, res, router = served
    cluster.check_roles(res, t, KEY)
    assert httpx.get(f"{router.base_url}/health", timeout=5).status_code == 200
    prompt = " ".join(["word"] * 400)
    body = {"model": t.served_model_id, "prompt": prompt, "max_tokens": 16, "stream": True, "ignore_eos": True}
    with httpx.stream(
        "POST", f"{router.base_url}/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
    ) as r:
        assert r.status_code == 200
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and len(lines) >= 2  # the decode node's stream, relayed as sent
    (pre,), (dec,) = cluster.role_urls(res, "prefill"), cluster.role_urls(res, "decode")
    assert prompt_tokens_counter(pre) >= 400  # the prompt was prefilled there
    assert prompt_tokens_counter(dec) <= 1  # its KV arrived: one token run on the decode node
    assert router.config["kv_s_per_token"] > 0  # KV over the NICs between two nodes
    prov = cluster.provenance(res.nodes, t)
    assert [(x["role"], x["tensor_parallel"], x["emulated"]) for x in prov] == [
        ("prefill", 8, True),
        ("decode", 8, True),
    ]
    # a wrong key is refused by the nodes, through the router
    bad = httpx.post(f"{router.base_url}/v1/completions", json=body | {"stream": False}, timeout=10)
    assert bad.status_code == 401


@pytest.mark.slow
def test_a_dead_role_is_named(served):
    t, p, res, router = served
    dec = res.by_role("decode")[0]
    p.terminate(dec.instance_id)
    with pytest.raises(ProviderError, match=r"decode node 1 is not serving"):
        cluster.check_roles(res, t, KEY, timeout_s=1)
    health = httpx.get(f"{router.base_url}/health", timeout=10)
    assert health.status_code == 503 and "decode 0" in health.text


def _listening(url: str) -> bool:
    try:
        httpx.get(f"{url}/health", timeout=2)
    except httpx.ConnectError:
        return False
    return True


@pytest.mark.slow
def test_a_worker_that_does_not_run_the_router_stops_it_through_its_stop_route(served, tmp_path):
    _, _, _, router = served
    assert _listening(router.base_url)
    # another target's folder: its key does not open this router's route, and its pid is not signalled
    assert cluster.stop_router(router.pid, "another-target", router.base_url) is False
    assert _listening(router.base_url)
    # a pid that is not this router (as on a worker where that number is some other process): the route
    assert cluster.stop_router(os.getpid(), "router", router.base_url) is True
    assert not _listening(router.base_url)


@pytest.mark.slow
def test_the_router_is_signalled_where_it_runs(served):
    _, _, _, router = served
    assert cluster.stop_router(router.pid, "router") is True
    assert not _listening(router.base_url)
