"""The per-target waits as the DAG's sensors poke them, on the local provider: an action that returns
at once, then one-look checks that say not yet (None), done (the value), or fail for good; and the
worker time every call held, summed per target."""

from __future__ import annotations

import time

import pytest
import yaml

from bakeoff.plan import load_plan
from bakeoff.providers import ProviderError
from bakeoff.run import pipeline, provisioning, teardown_steps, worker_time
from bakeoff.serving.deploy import DeployFailed


@pytest.fixture
def run(data_root, tmp_path):
    raw = load_plan("local-demo").model_dump(mode="json")
    raw.update(name="waits", targets=raw["targets"][:1])
    for w in raw["workloads"]:
        # one point: one concurrency, one repeat (the demo itself runs two)
        w.update(concurrency=[1], repeats=1, requests_per_point=4, warmup_requests=0, output_len=8, input_len=64)
    path = tmp_path / "waits.yaml"
    path.write_text(yaml.safe_dump(raw))
    run = pipeline.start_run(str(path), "manual__waits")
    rdir, slug = run["run_dir"], run["targets"][0]
    inst = provisioning.provision(rdir, slug)
    yield rdir, slug, inst
    teardown_steps.terminate(rdir, slug, inst)


def _until(check, *args, since: float):
    deadline = time.monotonic() + 60
    looks = 0
    while (out := check(*args, since=since)) is None:
        looks += 1
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return out, looks


@pytest.mark.slow
def test_each_wait_is_an_action_then_checks(run):
    rdir, slug, inst = run
    now = time.time()
    ready, looks = _until(provisioning.node_ready, rdir, slug, inst, since=now)
    assert looks >= 1, "provision returned before the emulator answered: the first look says not yet"
    assert ready["id"] == inst["id"] and ready["state"] == "running" and ready["port"]
    assert pipeline.deploy(rdir, slug, ready) == {"target": slug, "secrets": []}
    endpoint, _ = _until(pipeline.serving_ready, rdir, slug, ready, since=now)
    assert endpoint["base_url"].endswith(str(ready["port"])) and endpoint["emulated"] is True
    started = pipeline.benchmark(rdir, slug, endpoint)
    assert started == {"target": slug, "points": 1, "client_mode": "remote"}
    # a remote benchmark was measured by the action itself: its check is done at once
    assert pipeline.benchmark_done(rdir, slug, endpoint, started, since=now) == started
    held = worker_time.held_seconds(rdir)  # every call of every step above, provision included
    assert set(held) == {slug} and held[slug] > 0


@pytest.mark.slow
def test_checks_fail_for_good_when_the_node_ended_or_the_deadline_passed(run):
    rdir, slug, inst = run
    # not up yet (the emulator was started a moment ago) and waited past the target's deadline
    with pytest.raises(ProviderError, match="ready_timeout_s"):
        provisioning.node_ready(rdir, slug, inst, since=time.time() - 1801)
    ready, _ = _until(provisioning.node_ready, rdir, slug, inst, since=time.time())
    teardown_steps.terminate(rdir, slug, inst)
    with pytest.raises(ProviderError, match="ended before it was ready|exited before it was ready"):
        provisioning.node_ready(rdir, slug, inst, since=time.time())
    with pytest.raises(DeployFailed) as e:  # nothing serves, and the deadline is long past
        pipeline.serving_ready(rdir, slug, ready, since=time.time() - 3600)
    assert e.value.failure in ("timeout", "crash")
