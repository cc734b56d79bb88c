"""Server-side point figures from /metrics: parsing, counter deltas, SGLang gauges, and a live scrape."""

import pytest

from bakeoff.bench.metrics import server_metrics as sm
from bakeoff.engines.vllm import COUNTERS as VLLM
from bakeoff.serving.emulator.scripted import ScriptedServerProcess

VLLM_BEFORE = """# HELP vllm:prefix_cache_queries_total Prefix cache queries, in tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 500.0
vllm:spec_decode_num_drafts_total{model_name="m"} 100
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 300
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 150
vllm:prefix_cache_hits_created{model_name="m"} 1.7e9
vllm:num_requests_running{model_name="m"} 3
"""
# older vLLM: the same counters without _total; a timestamp after the value
VLLM_AFTER = """vllm:prefix_cache_queries{engine="0",model_name="m"} 3000.0 1700000000000
vllm:prefix_cache_queries{engine="1",model_name="m"} 3000.0
vllm:prefix_cache_hits{engine="0",model_name="m"} 3500.0
vllm:spec_decode_num_drafts{model_name="m"} 300
vllm:spec_decode_num_draft_tokens{model_name="m"} 900
vllm:spec_decode_num_accepted_tokens{model_name="m"} 550
"""


def test_vllm_counter_deltas_give_hit_rate_and_acceptance():
    before, after = sm.parse(VLLM_BEFORE), sm.parse(VLLM_AFTER)
    assert before[VLLM.prefix_queries] == 2000.0  # summed over label sets
    assert "vllm:num_requests_running" not in before and "vllm:prefix_cache_hits_created" not in before
    fig = sm.point_figures(before, after)
    assert fig["prefix_cache_queried_tokens"] == 4000.0
    assert fig["prefix_cache_hit_rate"] == pytest.approx(3000 / 4000)
    assert fig["spec_acceptance_length"] == pytest.approx(1 + 400 / 200)  # 1 + accepted / drafts
    assert fig["spec_acceptance_rate"] == pytest.approx(400 / 600)  # accepted / draft tokens
    assert fig["host_prefix_cache_hit_rate"] is None
    assert fig["server_metrics_source"] == "vllm-counters"


def test_no_metrics_no_queries_and_restarts_give_none_not_zero():
    assert sm.point_figures(None, None) == dict.fromkeys(sm.COLUMNS)
    same = sm.parse(VLLM_BEFORE)
    fig = sm.point_figures(same, same)  # nothing happened in the point
    assert fig["prefix_cache_hit_rate"] is None and fig["spec_acceptance_length"] is None
    # counters went down: the server restarted during the point, no figure rather than a wrong one
    fig = sm.point_figures(sm.parse(VLLM_AFTER), sm.parse(VLLM_BEFORE))
    assert fig["prefix_cache_hit_rate"] is None and fig["spec_acceptance_rate"] is None
    assert sm.point_figures({}, sm.parse('garbage line\nvllm:prefix_cache_hits_total{a="b"} notanumber\n')) == (
        dict.fromkeys(sm.COLUMNS)
    )


def test_sglang_gauges_are_read_after_the_point():
    after = sm.parse('sglang:cache_hit_rate{model_name="m"} 0.42\nsglang:spec_accept_length{model_name="m"} 2.5\n')
    fig = sm.point_figures({}, after)
    assert fig["prefix_cache_hit_rate"] == pytest.approx(0.42)
    assert fig["spec_acceptance_length"] == pytest.approx(2.5)
    assert fig["spec_acceptance_rate"] is None and fig["server_metrics_source"] == "sglang-gauges"


def test_scrape_reads_a_live_server_and_survives_a_dead_one():
    with ScriptedServerProcess({"ttft_ms": 1, "itl_ms": 1}) as srv:
        got = sm.scrape(srv.url, None)
        assert got is not None and "_taken_at" in got
        assert sm.scrape(srv.url + "/v1", None) is not None  # an OpenAI base URL works too
    assert sm.scrape("http://127.0.0.1:9", None, timeout_s=0.5) is None


def test_one_malformed_line_costs_only_that_line():
    """prometheus-client's parser refuses a whole exposition at its first bad line; the per-line
    fallback keeps every other figure."""
    text = VLLM_BEFORE + 'vllm:prefix_cache_hits_total{model_name="m" 12\n'  # unterminated label set
    assert sm.parse(text) == sm.parse(VLLM_BEFORE) != {}


def test_an_exposition_written_by_prometheus_client_reads_back():
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    registry = CollectorRegistry()
    hits = Counter("vllm:prefix_cache_hits", "hits", ["engine"], registry=registry)
    hits.labels("0").inc(7)
    hits.labels("1").inc(5)
    text = generate_latest(registry).decode()
    assert "vllm:prefix_cache_hits_created" in text  # the parser must not add the creation time
    assert sm.parse(text) == {VLLM.prefix_hits: 12.0}
