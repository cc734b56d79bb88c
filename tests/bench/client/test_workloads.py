"""Prompt synthesis and workload files: exact lengths, determinism, stated intervals, clear errors."""

import json

import numpy as np
import pytest

from bakeoff import tokens
from bakeoff.bench.client.prompts import synthesize
from bakeoff.bench.client.workloads import WorkloadFileError, build_specs, trace_specs
from bakeoff.plan import Workload


def test_synthetic_prompts_have_exact_token_counts_within_the_stated_interval():
    w = Workload(name="w", input_len=200, output_len=50, range_ratio=0.5, length_interval="inferencemax")
    specs = synthesize(w, 200)
    assert all(tokens.count(s.prompt) == s.input_len for s in specs)
    ins, outs = [s.input_len for s in specs], [s.output_len for s in specs]
    assert min(ins) >= 100 and max(ins) <= 200 and min(outs) >= 25 and max(outs) <= 50
    assert max(ins) - min(ins) > 80  # actually spread over [r L, L]
    v = Workload(name="v", input_len=200, output_len=50, range_ratio=0.5, length_interval="vllm")
    vi = [s.input_len for s in synthesize(v, 200)]
    assert min(vi) >= 100 and max(vi) <= 300 and max(vi) > 250


def test_synthesis_is_deterministic_per_seed_and_stream():
    w = Workload(name="w", input_len=64, output_len=8, range_ratio=0.5)
    assert synthesize(w, 5) == synthesize(w, 5)
    assert synthesize(w, 5) != synthesize(w, 5, stream=1)
    assert synthesize(w, 5) != synthesize(w.model_copy(update={"seed": 1}), 5)


def test_shared_prefix_ratio():
    w = Workload(name="w", input_len=100, output_len=8, prefix_ratio=0.6, prefix_groups=2)
    specs = synthesize(w, 6)
    assert all(tokens.count(s.prompt) == s.input_len == 100 for s in specs)
    first = [s.prompt.split()[:60] for s in specs]
    assert first[0] == first[2] == first[4] and first[1] == first[3] and first[0] != first[1]
    assert specs[0].prompt.split()[60:] != specs[2].prompt.split()[60:]


def test_inferencemax_preset_doubles_and_sizes_points():
    w = Workload(name="w", preset="inferencemax", concurrency=[4, 64], requests_per_point=3)
    assert w.levels() == [4, 8, 16, 32, 64]
    assert (w.requests_at(16), w.warmup_at(16)) == (160, 32)


def test_user_jsonl_prompts_and_messages(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"prompt": "one two three", "max_tokens": 5}\n\n{"messages": [{"role": "user", "content": "hi there"}]}\n'
    )
    w = Workload(name="w", source="jsonl", source_path=str(f), output_len=9, endpoint="chat")
    specs = build_specs(w, 4)
    got = sorted((s.input_len, s.output_len, s.messages is not None) for s in specs)
    assert got == [(2, 9, True), (2, 9, True), (3, 5, False), (3, 5, False)]


@pytest.mark.parametrize(
    "content,line,words",
    [
        ('{"prompt": "ok"}\n{"prompt": "x", ', 2, "not valid JSON"),
        ('{"prompt": "ok"}\n\n{"prompt": "a", "messages": []}\n', 3, "exactly one"),
        ('{"prompt": "a", "max_tokens": 0}\n', 1, "max_tokens"),
        ('{"messages": [{"content": "x"}]}\n', 1, "role"),
        ("[1, 2]\n", 1, "JSON object"),
    ],
)
def test_bad_jsonl_names_the_line(tmp_path, content, line, words):
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    w = Workload(name="w", source="jsonl", source_path=str(f))
    with pytest.raises(WorkloadFileError, match=rf"bad\.jsonl:{line}: .*{words}"):
        build_specs(w, 1)


def test_sharegpt(tmp_path):
    f = tmp_path / "sg.json"
    f.write_text(
        json.dumps(
            [
                {"conversations": [{"from": "human", "value": "a b c d"}, {"from": "gpt", "value": "x y"}]},
                {"conversations": [{"from": "human", "value": "lonely"}]},
            ]
        )
    )
    specs = build_specs(Workload(name="w", source="sharegpt", source_path=str(f)), 3)
    assert {(s.input_len, s.output_len) for s in specs} == {(4, 2)}
    f.write_text('[{"conversations": [\n  {"from": "human" "value": 1}]}]')
    with pytest.raises(WorkloadFileError, match=r"sg\.json:2"):
        build_specs(Workload(name="w", source="sharegpt", source_path=str(f)), 1)


def test_length_log_reproduces_the_empirical_distribution(tmp_path):
    rng = np.random.default_rng(3)
    ins = rng.choice([100, 400, 900], 300, p=[0.6, 0.3, 0.1])
    outs = ins // 10
    f = tmp_path / "log.csv"
    f.write_text("input_len,output_len,ts\n" + "".join(f"{i},{o},0\n" for i, o in zip(ins, outs, strict=True)))
    specs = build_specs(Workload(name="w", source="length_log", source_path=str(f)), 2000)
    got = np.array([s.input_len for s in specs])
    assert all(s.output_len == s.input_len // 10 for s in specs)  # pairs kept together
    for v in (100, 400, 900):
        assert abs((got == v).mean() - (ins == v).mean()) < 0.04
    assert all(tokens.count(s.prompt) == s.input_len for s in specs[:20])


def test_bad_length_log(tmp_path):
    f = tmp_path / "log.csv"
    f.write_text("input_len,output_len\n10,5\n12,abc\n")
    with pytest.raises(WorkloadFileError, match=r"log\.csv:3: .*integers"):
        build_specs(Workload(name="w", source="length_log", source_path=str(f)), 1)
    f.write_text("in,out\n1,2\n")
    with pytest.raises(WorkloadFileError, match=r"log\.csv:1: header"):
        build_specs(Workload(name="w2", source="length_log", source_path=str(f)), 1)


def test_trace(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp_ms": 1500, "input_len": 5, "output_len": 3}\n{"timestamp": 1.0}\n')
    offs, specs = trace_specs(Workload(name="w", load="trace", trace_path=str(f), input_len=7, output_len=2))
    assert list(offs) == [0.0, 0.5] and [(s.input_len, s.output_len) for s in specs] == [(7, 2), (5, 3)]
    f.write_text('{"timestamp": 1}\n{"timestamp": -2}\n')
    with pytest.raises(WorkloadFileError, match=r"t\.jsonl:2: .*timestamp"):
        trace_specs(Workload(name="w", load="trace", trace_path=str(f)))


def test_missing_file_and_settings_errors(tmp_path):
    with pytest.raises(WorkloadFileError, match="source_path"):
        build_specs(Workload(name="w", source="jsonl", source_path=str(tmp_path / "nope.jsonl")), 1)
    with pytest.raises(ValueError, match="source_path"):
        Workload(name="w", source="jsonl")
    with pytest.raises(ValueError, match="rates"):
        Workload(name="w", load="rate")
    with pytest.raises(ValueError, match="rates"):
        Workload(name="w", load="rate", rates=[0])
