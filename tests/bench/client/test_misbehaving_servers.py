"""Each misbehaviour of a server becomes a classified per-request result; nothing hangs or crashes."""

import asyncio
import json
import time

import pandas as pd
import pytest

from bakeoff.bench.client.prompts import RequestSpec
from bakeoff.bench.client.transport import StreamingClient
from bakeoff.bench.load.loadgen import PointId, request_body, to_record
from bakeoff.bench.run import run_workload
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import Slo, Workload, load_plan

KEY = "sekrit-key"


def one(url, fault, *, endpoint="completions", timeout=2.0, key=KEY, max_tokens=8):
    w = Workload(name="w", endpoint=endpoint, output_len=max_tokens)
    spec = RequestSpec(3, max_tokens, prompt="a b c")

    async def go():
        c = StreamingClient(url, api_key=key, timeout_s=timeout)
        try:
            t0 = time.perf_counter()
            out = await c.stream(c.build(*request_body(spec, w, f"fault:{fault}")))
            return to_record(out, PointId("r", "t", "w", 1, 0), spec, 0, False, t0, True)
        finally:
            await c.close()

    return asyncio.run(go())


@pytest.mark.parametrize(
    "fault,kind,status",
    [
        ("http_400", "http_4xx", 400),
        ("http_503", "http_5xx", 503),
        ("reset", "connection_reset", 200),
        ("truncated", "truncated", 200),
        ("malformed", "malformed_sse", 200),
        ("empty_choices", "empty_choices", 200),
        ("error_event", "server_error", 200),
    ],
)
def test_classified_errors(faulty_server, fault, kind, status):
    r = one(faulty_server.url, fault)
    assert r.error_kind == kind, r.error
    assert r.status_code == status
    assert r.e2e is None and r.elapsed is not None and r.elapsed < 2


@pytest.mark.parametrize("fault", ["hang", "silent"])
def test_timeouts_end_on_time(faulty_server, fault):
    t = time.monotonic()
    r = one(faulty_server.url, fault, timeout=0.5)
    assert r.error_kind == "timeout"
    assert 0.45 < time.monotonic() - t < 1.5


def test_wrong_key_is_a_4xx_and_the_key_is_never_in_the_record(faulty_server):
    r = one(faulty_server.url, "ok", key="wrong")
    assert r.error_kind == "http_4xx" and r.status_code == 401
    ok = one(faulty_server.url, "ok")
    assert ok.ok and KEY not in json.dumps(ok.to_row()) and KEY not in repr(StreamingClient("http://x:1", api_key=KEY))


def test_connection_refused_is_a_connect_error():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = one(f"http://127.0.0.1:{port}", "ok")
    assert r.error_kind == "connect_error"


def test_missing_usage_falls_back_to_client_count(faulty_server):
    r = one(faulty_server.url, "no_usage")
    assert r.ok and r.tokens_source == "client" and r.output_tokens == 8 and r.prompt_tokens is None


def test_early_stop_reports_what_was_generated_not_what_was_asked(faulty_server):
    r = one(faulty_server.url, "early_stop", max_tokens=8)
    assert r.ok and r.output_tokens == 4 and r.finish_reason == "stop" and r.requested_output_len == 8


def test_usage_disagreeing_with_client_count_is_flagged(faulty_server):
    r = one(faulty_server.url, "mismatch")
    assert r.ok and r.output_tokens == 16 and r.output_tokens_client == 8 and r.token_mismatch
    assert not one(faulty_server.url, "ok").token_mismatch


def test_multi_token_chunks(faulty_server):
    r = one(faulty_server.url, "multi", max_tokens=9)
    assert r.ok and r.output_tokens == 9 and r.output_tokens_client == 9 and r.chunks == 3
    assert len(r.chunk_offsets) == 3


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_empty_text_chunks_are_tokens(faulty_server, endpoint):
    """vLLM streams byte-fallback tokens as "": each is still a token and an ITL gap, while chat's
    opening role chunk and a closing empty delta are not."""
    r = one(faulty_server.url, "byte_fallback", endpoint=endpoint, max_tokens=9)
    assert r.ok, r.error
    assert r.chunks == 9 and len(r.chunk_offsets) == 9
    assert r.output_tokens == 9 and r.output_tokens_client == 9 and r.client_count_method == "chunks"
    assert not r.token_mismatch
    assert r.ttft == r.chunk_offsets[0]


def test_empty_text_chunks_keep_the_point_at_one_token_per_chunk(faulty_server, tmp_path):
    plan = load_plan("local-demo")
    t = plan.targets[0]
    w = Workload(name="bf", input_len=4, output_len=9, concurrency=[2], requests_per_point=4, warmup_requests=0)
    ep = Endpoint(target=t.slug, base_url=faulty_server.url, model="fault:byte_fallback", stack="vllm")
    (s,) = run_workload(ep, t, w, Slo(), tmp_path, "run1", KEY, emulated=True, calibrate=False, provenance=False)
    assert s["tokens_per_chunk"] == 1.0 and s["token_mismatches"] == 0
    assert s["token_count_method"] == "usage"
    # with every token's gap kept, mean ITL matches TPOT; dropping the empty chunks inflates it ~1.6x
    assert s["itl_ms_mean"] < 1.2 * s["tpot_ms_mean"]


def test_crlf_event_separators(faulty_server):
    r = one(faulty_server.url, "crlf")
    assert r.ok and r.output_tokens_client == 8


def test_reasoning_counts_for_ttft_answer_reported_separately(faulty_server):
    r = one(faulty_server.url, "reasoning", endpoint="chat", max_tokens=8)
    assert r.ok and r.output_tokens_client == 8
    assert r.ttfa - r.ttft > 0.05  # three reasoning chunks 20 ms apart come first


def test_a_failing_server_still_yields_saved_points(faulty_server, tmp_path):
    plan = load_plan("local-demo")
    t = plan.targets[0]
    w = Workload(
        name="fails",
        input_len=4,
        output_len=4,
        concurrency=[2],
        requests_per_point=4,
        warmup_requests=0,
        request_timeout_s=2,
    )
    ep = Endpoint(target=t.slug, base_url=faulty_server.url, model="fault:http_503", stack="vllm")
    out = run_workload(ep, t, w, Slo(ttft_p99_ms=100), tmp_path, "run1", KEY, emulated=True, calibrate=False)
    assert len(out) == 1 and out[0]["failed"] == 4 and out[0]["error_rate"] == 1.0 and not out[0]["meets_slo"]
    df = pd.read_parquet(tmp_path / "requests" / "fails-c2-r0.parquet")
    assert set(df["error_kind"]) == {"http_5xx"} and len(df) == 4
    prov = json.loads((tmp_path / "provenance" / "fails-c2-r0.json").read_text())
    assert prov["before"]["version"]["json"] == {"version": "0.32.0"}
    assert prov["before"]["models"]["json"]["data"][0]["id"] == "m"
    assert "requests_total" in prov["before"]["metrics"]["text"] and prov["after"]["metrics"]["status"] == 200
    assert KEY not in (tmp_path / "provenance" / "fails-c2-r0.json").read_text()
