"""Request records built by hand for the metric tests (and the SLO tests that judge points made of them)."""

from bakeoff.bench.metrics.records import RequestRecord


def rec(i, start, **kw):
    """Request ``i`` sent ``start`` seconds into a point; ``kw`` sets the measured fields."""
    base = dict(
        run_id="r",
        target="t",
        workload="w",
        concurrency=4,
        repeat=0,
        index=i,
        warmup=False,
        send_time=1000.0 + start,
        start_offset=start,
        requested_input_len=30,
        requested_output_len=8,
    )
    base.update(kw)
    return RequestRecord(**base)
