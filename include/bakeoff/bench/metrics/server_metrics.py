"""What the server counted during one point: prefix-cache hits and speculative-decoding acceptance.

The client cannot see either, so /metrics (Prometheus text) is scraped just before and just after
each point and the counters' deltas are the point's figures. Each engine declares its names in its
module (``engines/``): vLLM exports counters (with or without the ``_total`` suffix, by
version); SGLang exports gauges that describe its recent window, read as they stand after the point.
A server that exports none of them gives None, never zero.

- prefix_cache_hit_rate = delta(hits) / delta(queries) (tokens; None when no query was counted)
- spec_acceptance_length = 1 + delta(accepted tokens) / delta(drafts) (tokens per verification step)
- spec_acceptance_rate = delta(accepted tokens) / delta(draft tokens)
- host_prefix_cache_hit_rate: the same over the host (external / offload) tier's counters
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bakeoff.bench.metrics.metric_units import filled
from bakeoff.core.endpoint import Endpoint
from bakeoff.engines import registry
from bakeoff.engines.base import Counters
from bakeoff.serving import egress

log = logging.getLogger(__name__)

# counters summed over every label set (a name is looked up with and without "_total"), and gauges read
# after the point: every engine's, as its module declares them
COUNTERS = registry.counters()
GAUGES = registry.gauges()

# The per-point columns this module fills, declared here only (bench.metrics.summary.POINT_METRICS lists
# the unit with the rest): None when the server does not export what a column is computed from.
UNIT = filled(
    "bench.metrics.server_metrics",
    [
        ("prefix_cache_hit_rate", "ratio", "Δprefix cache hits / Δqueries over the point (server /metrics)"),
        ("host_prefix_cache_hit_rate", "ratio", "the same for the host-memory (KV offload) tier"),
        ("prefix_cache_queried_tokens", "tokens", "Δprefix cache queries over the point"),
        ("spec_acceptance_length", "tokens/step", "1 + Δaccepted draft tokens / Δdrafts"),
        ("spec_acceptance_rate", "ratio", "Δaccepted draft tokens / Δdraft tokens"),
        ("server_metrics_source", "label", "vllm-counters, sglang-gauges or None"),
    ],
)
COLUMNS = tuple(c.name for c in UNIT.columns)


def parse(text: str) -> dict[str, float]:
    """The counters and gauges this module reads, each summed over its label sets, by
    prometheus-client's text parser. Names are stored without ``_total``; NaN values are skipped.

    The parser rejects a whole exposition at its first malformed line, so a server with one bad
    line would lose every figure: then each line is parsed on its own and the bad ones skipped."""
    wanted = {name for c in COUNTERS for name in c.names} | {name for g in GAUGES for name in g.names}
    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except ValueError:
        samples = []
        for line in text.splitlines():
            try:
                samples += [s for family in text_string_to_metric_families(line + "\n") for s in family.samples]
            except ValueError:
                continue
    out: dict[str, float] = {}
    for sample in samples:
        name = sample.name.removesuffix("_total")
        if name not in wanted or math.isnan(sample.value):
            continue
        out[name] = out.get(name, 0.0) + sample.value
    return out


def scrape(endpoint: Endpoint | str, api_key: str | None, *, timeout_s: float = 5.0) -> dict[str, float] | None:
    """The parsed /metrics of ``endpoint`` (an Endpoint or a base URL); None when the server has no
    /metrics or cannot be reached (the point is still measured)."""
    base = endpoint if isinstance(endpoint, str) else endpoint.base_url
    verify = True if isinstance(endpoint, str) else endpoint.verify()
    # an Endpoint: a custom stack's declared route, or none
    path = "/metrics" if isinstance(endpoint, str) else endpoint.route("metrics", "/metrics")
    if path is None:  # a custom stack that declares no metrics route
        return None
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    base = base.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    try:
        with egress.client(base_url=base, headers=headers, timeout=timeout_s, verify=verify) as c:
            r = c.get(path)
    except httpx.HTTPError as e:
        log.info("server metrics unavailable at %s: %s", base, type(e).__name__)
        return None
    if r.status_code != 200:
        return None
    return {**parse(r.text), "_taken_at": time.time()}


def _delta(before: Mapping[str, float], after: Mapping[str, float], name: str) -> float | None:
    if name not in after:
        return None
    d = after[name] - before.get(name, 0.0)
    return d if d >= 0 else None  # a server restart resets counters: no figure rather than a wrong one


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def point_figures(before: Mapping[str, float] | None, after: Mapping[str, float] | None) -> dict[str, Any]:
    """The point's server-side columns (COLUMNS) from the scrapes before and after it; None where the
    server exports nothing to compute a column from."""
    out: dict[str, Any] = dict.fromkeys(COLUMNS)
    if after is None:
        return out
    before = before or {}
    source = None
    for counters in COUNTERS:  # the first engine's counters the server exports
        figures = _counted(before, after, counters)
        if any(v is not None for v in figures.values()):
            out |= figures
            source = counters.source
            break
    for gauges in GAUGES:  # a window gauge where no counter gave the figure
        if out["prefix_cache_hit_rate"] is None and gauges.hit_rate in after:
            out["prefix_cache_hit_rate"] = after[gauges.hit_rate]
            source = gauges.source
        if out["spec_acceptance_length"] is None and after.get(gauges.accept_length):
            out["spec_acceptance_length"] = after[gauges.accept_length]
            source = gauges.source
    out["server_metrics_source"] = source
    return out


def _counted(before: Mapping[str, float], after: Mapping[str, float], c: Counters) -> dict[str, float | None]:
    """The columns one engine's counters give over the point."""
    queries = _delta(before, after, c.prefix_queries)
    drafts = _delta(before, after, c.spec_drafts)
    accepted = _delta(before, after, c.spec_accepted)
    return {
        "prefix_cache_queried_tokens": queries,
        "prefix_cache_hit_rate": _ratio(_delta(before, after, c.prefix_hits), queries),
        "host_prefix_cache_hit_rate": _ratio(_delta(before, after, c.host_hits), _delta(before, after, c.host_queries)),
        "spec_acceptance_length": 1.0 + accepted / drafts if drafts and accepted is not None else None,
        "spec_acceptance_rate": _ratio(accepted, _delta(before, after, c.spec_draft_tokens)),
    }
