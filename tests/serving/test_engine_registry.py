"""The engine registry is the one list of engines: every catalog stack is a registered engine's, the
words a server or a published framework says pick the most specific engine, and an engine either sits
behind the node's front or names how it serves TLS itself."""

from __future__ import annotations

import pytest

from bakeoff import catalog
from bakeoff.engines import registry
from bakeoff.engines.base import Boot
from bakeoff.plan.custom_stack import CUSTOM_STACK


def test_every_catalog_stack_is_a_registered_engine_and_every_engine_but_custom_has_its_row():
    assert set(catalog.stacks()) == set(registry.REGISTERED) - {CUSTOM_STACK}


def test_an_engine_whose_words_quote_another_is_matched_first():
    order = [e.name for e in registry.by_precedence()]
    assert order.index("emulator") < order.index("vllm") and order.index("atom") < order.index("vllm")
    assert order.index("trtllm") < order.index("sglang") < order.index("vllm")
    assert registry.framework_family("TensorRT-LLM 1.0 with vLLM tokenizer") == "trtllm"
    assert registry.framework_family("SGLang 0.5") == "sglang" and registry.framework_family("ROCm PyTorch") is None


def test_each_engines_metric_names_are_its_own():
    counters = [c.source for c in registry.counters()]
    gauges = [g.source for g in registry.gauges()]
    assert counters == ["vllm-counters"] and gauges == ["sglang-gauges"]
    names = [n for c in registry.counters() for n in c.names] + [n for g in registry.gauges() for n in g.names]
    assert len(names) == len(set(names))


def test_an_engine_not_behind_the_front_names_its_tls_flags():
    with pytest.raises(ValueError, match="tls_flags"):
        Boot("serve")
    assert Boot("serve", fronted=True).tls_flags is None
    for name in registry.deployable():
        boot = registry.REGISTERED[name].boot
        assert boot is None or boot.fronted or boot.tls_flags, name
