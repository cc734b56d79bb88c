"""The one create every cloud shares (providers/base.CloudProvider): its order, its record, its undo.

A minimal in-memory cloud implements only the hooks, as a new cloud would; the real clouds are held
to the same lifecycle by their own tests (moto for EC2, the spec-held fakes for the others)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from cloud_helpers import launch_args, make_target, new_run_id

from bakeoff import store
from bakeoff.core import facts
from bakeoff.core.launch import LaunchSpec
from bakeoff.providers.base import CapacityError, CloudProvider, Instance, Placement, ProviderError, Refused
from bakeoff.providers.tags import TAG_PORT, TAG_RUN, TAG_TARGET


class TinyCloud(CloudProvider):
    """Refuses the regions in ``full`` (capacity) and ``capped`` (quota); remembers every call."""

    name = "tiny"
    tag_codec = None

    def __init__(self, full: set[str] = frozenset(), capped: set[str] = frozenset()):
        self.full, self.capped = set(full), set(capped)
        self.nodes: dict[str, Instance] = {}
        self.calls: list[str] = []
        self.networks: set[str] = set()

    def require(self, target: Any) -> None:
        self.calls.append("require")
        if not target.provider_options.ingress_cidr:
            raise ProviderError(f"targets.{target.name}.provider_options.ingress_cidr: set it")

    def prepare(self, target: Any, run_id: str, tags: dict[str, str]) -> str:
        self.calls.append("prepare")
        self.networks.add(f"{run_id}/{target.slug}")
        return f"{run_id}/{target.slug}"

    def placements(self, target: Any, context: Any) -> list[Placement]:
        return [Placement(r) for r in target.provider_options.regions]

    def launch(self, target, run_id, place, script, tags, spec, context) -> Instance:
        self.calls.append(f"launch {place.region}")
        assert script.startswith("#!") and context in self.networks  # rendered, and behind its network
        if place.region in self.full:
            raise Refused("capacity", "OutOfStock", "no hosts left")
        if place.region in self.capped:
            raise Refused("quota", "LimitExceeded")
        inst = Instance("tiny", f"n{len(self.nodes)}", tags[TAG_TARGET], tags[TAG_RUN], "pending", tags=tags)
        inst.region = place.region
        self.nodes[inst.id] = inst
        return inst

    def abandon(self, target: Any, run_id: str, context: Any) -> None:
        self.calls.append("abandon")
        self.networks.discard(context)

    def check_ready(self, instance: Instance) -> Instance | None:
        return instance

    def describe(self, instance_id: str) -> Instance | None:
        return self.nodes.get(instance_id)

    def terminate(self, instance_id: str) -> bool:
        return self.nodes.pop(instance_id, None) is not None

    def list_tagged(self, run_id: str | None = None) -> list[Instance]:
        return [i for i in self.nodes.values() if run_id is None or i.run_id == run_id]


def _target(regions: list[str], **opts: Any):
    return make_target("vultr", regions=regions, **opts)


def test_create_fails_over_records_each_refusal_and_tags_the_node():
    cloud, t, rid = TinyCloud(full={"r1"}, capped={"r2"}), _target(["r1", "r2", "r3"]), new_run_id()
    inst = cloud.create(t, rid, **launch_args(rid, t))
    assert inst.region == "r3" and cloud.calls == ["require", "prepare", "launch r1", "launch r2", "launch r3"]
    assert inst.tags[TAG_PORT] == str(t.stack_spec.port) and inst.tags["bakeoff:plan"] == "p"
    prov = inst.provisioning.model_dump(mode="json")
    assert prov["attempts"] == 3 and prov["refusals"] == {"capacity": 1, "quota": 1}
    assert [(r["where"], r["reason"], r["code"]) for r in prov["refused"]] == [
        ("r1", "capacity", "OutOfStock"),
        ("r2", "quota", "LimitExceeded"),
    ]
    assert prov["region"] == prov["placement"] == "r3" and prov["instance_type"] == t.instance_type
    assert cloud.networks == {f"{rid}/{t.slug}"}  # the node stands behind it: nothing undone


def test_a_retried_create_reuses_the_node_and_launches_nothing():
    cloud, t, rid = TinyCloud(), _target(["r1"]), new_run_id()
    first = cloud.create(t, rid, **launch_args(rid, t))
    cloud.calls.clear()
    again = cloud.create(t, rid, **launch_args(rid, t))
    assert again.id == first.id and cloud.calls == ["require"] and len(cloud.nodes) == 1
    assert again.provisioning.model_dump(mode="json")["reused"] is True


def test_every_placement_refused_undoes_the_network_and_names_what_was_tried():
    cloud, t, rid = TinyCloud(full={"r1", "r2"}), _target(["r1", "r2"]), new_run_id()
    with pytest.raises(CapacityError) as e:
        cloud.create(t, rid, **launch_args(rid, t))
    assert "r1 (OutOfStock: no hosts left), r2 (OutOfStock: no hosts left)" in str(e.value)
    assert f"targets.{t.name}.provider_options" in str(e.value)
    assert cloud.calls[-1] == "abandon" and cloud.networks == set() and cloud.nodes == {}
    # the refusal keeps the lifecycle's record: the pipeline's provision_refused record reads it typed
    record = facts.ProvisioningRecord.model_validate(e.value.provisioning)
    assert record.attempts == 2 and record.refusal_counts() == {"capacity": 2} and record.region is None
    assert [r.where for r in record.refused] == ["r1", "r2"]


def test_a_launch_error_also_undoes_the_network():
    class Broken(TinyCloud):
        def launch(self, *a: Any, **kw: Any) -> Instance:
            raise ProviderError("tiny: refused: bad image")

    cloud, t, rid = Broken(), _target(["r1"]), new_run_id()
    with pytest.raises(ProviderError, match="bad image"):
        cloud.create(t, rid, **launch_args(rid, t))
    assert cloud.calls[-1] == "abandon" and cloud.networks == set()


def test_options_are_checked_before_any_cloud_call():
    cloud, t = TinyCloud(), _target(["r1"], ingress_cidr=None)
    with pytest.raises(ProviderError, match="provider_options.ingress_cidr"):
        cloud.create(t, new_run_id(), **launch_args("r", t))
    assert cloud.calls == ["require"]


def test_a_launch_spec_with_an_unknown_field_is_refused_naming_it_and_hides_its_secrets():
    with pytest.raises(ProviderError, match="unknown field.*api_keey"):
        LaunchSpec.of({"api_keey": "x"})
    spec = LaunchSpec.of({"api_key": "bk-secret", "tls": {"key": "PRIVATE"}, "expires_at": 5.0})
    assert "bk-secret" not in repr(spec) and "PRIVATE" not in repr(spec) and spec.expires_at == 5.0


def test_times_to_running_and_serving_ready_come_from_their_own_steps_records(data_root):
    """provision writes its record once; node_ready and serving_ready write their own, and the typed
    view folds their times into how the create went."""
    rdir = str(store.run_dir("demo", "r-times"))
    launched = time.time() - 30
    prov = facts.Provision(instance_id="i", launched_at=launched, provisioning={"attempts": 1})
    store.record(rdir, prov.STEP, prov.to_json(), slug="a")
    ready = facts.NodeReady(instance_id="i", running_at=launched + 29.5)
    store.record(rdir, ready.STEP, ready.to_json(), slug="a")
    served = facts.Deploy(ready=True, ready_at=launched + 31.0)
    store.record(rdir, served.STEP, served.to_json(), slug="a")
    first = store.run_facts(rdir).target("a").provisioning()
    assert first.attempts == 1 and 29 <= first.running_s <= first.serving_ready_s < 120
    assert store.read_record(rdir, "provision", "a") == prov.to_json()  # nobody else rewrote it


def test_an_undo_that_fails_does_not_hide_why_the_create_failed():
    class Stuck(TinyCloud):
        def abandon(self, target: Any, run_id: str, context: Any) -> None:
            raise ProviderError("tiny: network busy")

    cloud, t, rid = Stuck(full={"r1"}), _target(["r1"]), new_run_id()
    with pytest.raises(CapacityError, match="r1 \\(OutOfStock"):
        cloud.create(t, rid, **launch_args(rid, t))
