"""Prompts sized in the served model's tokens, output tokens counted by its tokenizer, run-seeded prompts."""

import json
import random

import pandas as pd
import pytest

from bakeoff.bench.cli import AdhocTarget
from bakeoff.bench.client import sizing
from bakeoff.bench.client.prompts import prompt_seed, synthesize
from bakeoff.bench.client.tokenize import TokenCounter, discover
from bakeoff.bench.client.workloads import build_specs
from bakeoff.bench.run import run_workload
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import Slo, Workload
from tests.bench.subword_server import BOS, SubwordServer, word_tokens


def _ep(url, model="sub"):
    return Endpoint(target="t", base_url=url, model=model, stack="vllm")


def _run(srv, w, tmp_path, run_id="run-1"):
    out = run_workload(
        _ep(srv.url), AdhocTarget("t", 1), w, Slo(), tmp_path, run_id, None, False, provenance=False, calibrate=False
    )
    reqs = pd.read_parquet(tmp_path / "requests" / f"{w.name}-c{w.concurrency[0]}-r0.parquet")
    return out, reqs, json.loads((tmp_path / f"prompt_sizing-{w.name}.json").read_text())


@pytest.mark.parametrize(
    "route,endpoint", [("tokenize", "completions"), ("tokenize", "chat"), ("usage-probe", "completions")]
)
def test_prompts_measure_the_requested_length_under_a_subword_tokenizer(tmp_path, route, endpoint):
    """The server counts ~2 tokens per word; the prompts it measures are still exactly the requested
    length (by /tokenize, chat template included, or by probing usage when there is no /tokenize)."""
    w = Workload(
        name="w",
        endpoint=endpoint,
        input_len=128,
        output_len=8,
        range_ratio=0.5,
        concurrency=[2],
        requests_per_point=12,
        warmup_requests=0,
    )
    with SubwordServer(tokenize=route == "tokenize") as srv:
        (point,), reqs, doc = _run(srv, w, tmp_path)
    assert doc["method"] == route and doc["check"]["error_max_abs"] == 0
    assert (reqs["prompt_tokens"] == reqs["requested_input_len"]).all()
    assert reqs["requested_input_len"].between(64, 128).all() and reqs["requested_input_len"].nunique() > 3
    assert point["input_len_error"] == 0 and point["prompt_sizing"] == route
    assert point["input_len_measured_mean"] == point["input_len_requested_mean"]
    assert point["input_len_tolerance"] == 0.02 and point["prompt_seed"] == doc["prompt_seed"]


def test_sglang_shaped_tokenize_sizes_chat_by_probe_and_counts_output_by_tokenize(tmp_path):
    """/v1/tokenize without chat messages (as SGLang's): chat prompts are sized by probing usage,
    template included, and output tokens would be counted by the plain-text route."""
    w = Workload(
        name="w", endpoint="chat", input_len=100, output_len=8, concurrency=[1], requests_per_point=5, warmup_requests=0
    )
    with SubwordServer(tokenize_path="/v1/tokenize", chat_tokenize=False) as srv:
        (point,), reqs, doc = _run(srv, w, tmp_path)
    assert (doc["method"], doc["output_count_route"]) == ("usage-probe", "tokenize")
    assert (reqs["prompt_tokens"] == reqs["requested_input_len"]).all() and point["input_len_error"] == 0


@pytest.mark.parametrize("per_token,method", [(False, "tokenize"), (True, "chunks")])
def test_output_tokens_without_usage_are_counted_by_the_model_tokenizer(tmp_path, per_token, method):
    """No usage. Whole words per chunk: chunks and words both under-count, the tokenized text is exact.
    One token per chunk (found by tokenizing a sample of chunks): the chunk count is exact."""
    w = Workload(name="w", input_len=32, output_len=40, concurrency=[2], requests_per_point=6, warmup_requests=0)
    with SubwordServer(usage=False, per_token=per_token) as srv:
        (point,), reqs, _ = _run(srv, w, tmp_path)
    assert (reqs["tokens_source"] == "client").all()
    assert (reqs["output_tokens"] == reqs["requested_output_len"]).all()
    assert (reqs["chunks"] < reqs["output_tokens"]).all() != per_token
    assert (reqs["client_count_method"] == method).all() and point["token_count_method"] == f"client-{method}"
    assert point["input_len_measured_mean"] != point["input_len_measured_mean"]  # NaN: no usage to measure by


def test_prompts_differ_between_runs_unless_fixed(tmp_path):
    """Two runs of one workload send different prompts (no prefix cache carried over); one run sends the
    same prompts to every target; prompt_seeding fixed repeats them; the seed is recorded."""
    w = Workload(name="w", input_len=48, output_len=4, concurrency=[1], requests_per_point=4, warmup_requests=0)
    sent = {}
    for run_id, sub in (("run-1", "a"), ("run-1", "b"), ("run-2", "c")):
        with SubwordServer() as srv:
            (point,), _, _ = _run(srv, w, tmp_path / sub, run_id)
            sent[sub] = (list(srv.prompts), point["prompt_seed"])
    assert sent["a"] == sent["b"]
    assert sent["a"][1] != sent["c"][1] and not set(sent["a"][0]) & set(sent["c"][0])
    fixed = w.model_copy(update={"prompt_seeding": "fixed"})
    assert prompt_seed(fixed, "run-1") == prompt_seed(fixed, "run-2") == fixed.seed
    one, two = (build_specs(fixed, 3, seed=prompt_seed(fixed, r)) for r in ("run-1", "run-2"))
    assert one == two


def test_shared_prefix_is_sized_in_tokens_and_shared_only_within_a_run():
    costs = {v: word_tokens(v) for v in sizing.WORDS}
    sizer = sizing.PromptSizer("tokenize", {v: c + BOS for v, c in costs.items()}, costs)
    w = Workload(name="w", input_len=100, output_len=8, prefix_ratio=0.6, prefix_groups=2)
    seed = prompt_seed(w, "run-1")
    specs = synthesize(w, 4, sizer=sizer, seed=seed)
    assert all(sizer.cost(s.prompt.split()) == s.input_len == 100 for s in specs)
    heads = [sizer.prefix(s.prompt, 60) for s in specs]
    assert heads[0] == heads[2] and heads[1] == heads[3] and heads[0] != heads[1]
    assert sizer.cost(heads[0]) >= 60 - max(costs.values())
    other = synthesize(w, 4, sizer=sizer, seed=prompt_seed(w, "run-2"))
    assert sizer.prefix(other[0].prompt, 60) != heads[0]


def test_sizer_corrects_a_constant_offset_and_states_its_error():
    """A tokenizer that adds tokens the per-word fit cannot see (here 3 per prompt beyond a lone word's):
    verification finds the offset, corrects it and reports the achieved error."""

    class Quirky(TokenCounter):
        method = "tokenize"

        def count(self, text, *, chat=False, special=True):
            words = text.split()
            return sum(word_tokens(v) for v in words) + 1 + (3 if len(words) > 9 else 0)

    s = sizing.calibrate(Quirky(), lengths=[100, 200])
    assert s.bias == 3 and s.check["bias_tokens"] == 3 and s.check["error_max_abs"] == 0
    prompt = s.build(150, random.Random(1))
    assert Quirky().count(prompt) == 150


def test_server_without_any_counting_route_falls_back_to_words(faulty_server):
    c = discover(_ep(faulty_server.url, "m"), "sekrit-key")
    assert c.method == "words"
    assert sizing.calibrate(c).method == "words"
