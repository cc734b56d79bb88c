"""Attacks on teardown: nothing a cloud's listing, a region's outage, a second compartment or a
tampered record does may leave a node billing, and nothing may pass for a clean teardown when it was not.

Every cloud here is a real fake server (moto, the Vultr/DigitalOcean fake, the OCI Core/Search fake
the oci SDK signs requests to); faults are injected into those servers.
"""

from __future__ import annotations

import copy
import json
import runpy
import time
import uuid
from pathlib import Path

import pytest

from bakeoff import secrets, store
from bakeoff.cleanup import reaper
from bakeoff.cleanup.teardown import TeardownIncomplete
from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.providers.base import PartialListing
from bakeoff.providers.digitalocean import DigitalOceanProvider
from bakeoff.providers.oci import OciProvider
from bakeoff.providers.tags import LABELS
from bakeoff.providers.vultr import VultrProvider
from bakeoff.run import teardown_steps
from bakeoff.serving import userdata
from bakeoff_sandbox import oci as fake_oci
from bakeoff_sandbox.clouds import TOKEN, Clouds
from bakeoff_sandbox.oci import throwaway_api_key

ROOT = Path(__file__).resolve().parents[2]
CIDR = "127.0.0.1/32"
VULTR_LIST = "GET /vultr/v2/bare-metals"
DEAD = {"token": "t", "base_url": "http://127.0.0.1:9/v2", "backoff_s": 0.001}


@pytest.fixture(scope="module")
def clouds():
    server = Clouds(None, boot_s=0.05).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def oci_fake():
    server = fake_oci.FakeOci(None, boot_s=0.05).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def oci_key():
    return throwaway_api_key()


@pytest.fixture
def rest(clouds):
    yield lambda provider: {
        "token": TOKEN,
        "base_url": f"{clouds.url}/{'vultr' if provider == 'vultr' else 'do'}/v2",
        "poll_s": 0.02,
        "backoff_s": 0.001,
    }
    for c in (clouds.vultr, clouds.do):
        c.fail_queue.clear()


@pytest.fixture
def oci_creds(oci_fake, oci_key):
    """The connection as an operator sets it: home region, default compartment, one endpoint per region."""
    yield {
        "user": fake_oci.USER,
        "tenancy": fake_oci.TENANCY,
        "fingerprint": oci_key[1],
        "region": fake_oci.REGION,
        "key_content": oci_key[0],
        "compartment_id": fake_oci.COMPARTMENT,
        "service_endpoint": oci_fake.endpoint,
        "poll_s": 0.02,
        "backoff_s": 0.01,
    }
    oci_fake.fail_regions = set()


@pytest.fixture
def resolver():
    """A credentials resolver to pass into the steps (as the DAG passes its own); ``resolver.use(fn)``
    changes what it resolves to."""
    current = [lambda name: {}]

    def resolve(name):
        return current[0](name)

    resolve.use = lambda fn: current.__setitem__(0, fn)
    return resolve


ENDED: dict[str, str] = {}  # run id -> its DAG run's state, for runs Airflow says have ended


def airflow_says(plan: str, run_id: str) -> str | None:
    """The reaper's run_state: what Airflow would answer for these test runs (None: unknown)."""
    return ENDED.get(run_id, "running")


def _plan(*specs: dict):
    """The sandbox plan with these targets (each a change to its Vultr target)."""
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    base = next(t for t in raw["targets"] if t["provider"] == "vultr")
    targets = []
    for spec in specs:
        t = copy.deepcopy(base)
        opts = spec.pop("provider_options", {})
        if spec.get("provider", t["provider"]) != t["provider"]:  # another cloud's options are not Vultr's
            t["provider_options"] = {}
        t.update(spec)
        t["provider_options"].update(opts)
        targets.append(t)
    raw["targets"] = targets
    return plan_from_dict(raw)


VULTR = {"name": "mi355x-vllm"}
DO = {
    "name": "mi300x-vllm",
    "provider": "digitalocean",
    "instance_type": "gpu-mi300x8-1536gb",
    "provider_options": {"regions": ["atl1"]},
}


def _oci_target(subnet: str, compartment: str) -> dict:
    return {
        "name": "b200-oci",
        "provider": "oci",
        "instance_type": "BM.GPU.B200.8",
        "provider_options": {"regions": [], "subnet_ocid": subnet, "compartment_id": compartment, "ingress_cidr": CIDR},
    }


def _run(plan, status: str = "running") -> tuple[Path, str]:
    rid = f"manual__2026-11-29T21:00:00.{uuid.uuid4().hex[:6]}+00:00"
    rdir = store.run_dir(plan.name, rid)
    store.write_json(rdir / "plan.json", plan.model_dump(mode="json"))
    store.record(rdir, store.START, {"plan": plan.name, "run_id": rid, "started_at": time.time()})
    if status != "running":
        ENDED[rid] = status
    return rdir, rid


def _launch(provider, plan, slug: str, rid: str, expires_in: float = 3600):
    target = plan.target(slug)
    tags = {
        "bakeoff:run_id": rid,
        "bakeoff:target": target.slug,
        "bakeoff:plan": plan.name,
        "bakeoff:expires_at": str(int(time.time() + expires_in)),
        "bakeoff:installation": secrets.installation_id(),  # as provisioning.provision tags it
    }
    return provider.create(
        target,
        rid,
        tags=tags,
        spec={"api_key": "bk-" + "0" * 40, "expires_at": time.time() + 3600, "boot": userdata.render_for},
    )


def _record(rdir: Path, slug: str, inst) -> None:
    """What provision records right after create."""
    store.record(rdir, "provision", {"instance_id": inst.id, "launched_at": time.time()}, slug=slug)


# --- terminate: the known id first --------------------------------------------------------------


@pytest.mark.parametrize("known_from", ["xcom", "instance.json"])
def test_terminate_kills_the_known_node_when_listing_fails(rest, clouds, resolver, data_root, known_from):
    """A listing error used to raise before the known id was terminated; with a failed provision
    (no XCom instance) the id comes from the target's instance.json."""
    plan = _plan(VULTR)
    rdir, rid = _run(plan)
    resolver.use(lambda name: rest(name))
    inst = _launch(VultrProvider(rest("vultr")), plan, "mi355x-vllm", rid)
    if known_from == "instance.json":
        store.write_json(store.target_dir(plan.name, rid, "mi355x-vllm") / "instance.json", inst.to_dict())
    clouds.vultr.fail_queue.extend([f"{VULTR_LIST}:503"] * 12)
    out = teardown_steps.terminate(
        str(rdir), "mi355x-vllm", inst.to_dict() if known_from == "xcom" else None, credentials=resolver
    )
    assert inst.id not in clouds.vultr.live() and out["terminated"] == [inst.id]
    step = store.read_record(rdir, "terminate", "mi355x-vllm")
    assert step["instances"] == [inst.id] and step["terminated_at"] and step["errors"] == []


# --- sweep: every recorded id, every provider, raise at the end ----------------------------------


def test_sweep_tries_every_provider_kills_recorded_ids_and_raises_at_the_end(rest, clouds, resolver, data_root):
    plan = _plan(VULTR, DO)
    rdir, rid = _run(plan)
    vultr = VultrProvider(rest("vultr"))
    recorded = _launch(vultr, plan, "mi355x-vllm", rid)
    _record(rdir, "mi355x-vllm", recorded)
    # a second node of the target whose create answer was lost: tagged, never recorded
    lost = vultr.api.json(
        "POST",
        "bare-metals",
        json={
            "region": "ewr",
            "plan": "p",
            "os_id": 1,
            "tags": LABELS.encode({"bakeoff:run_id": rid, "bakeoff:target": "mi355x-vllm"}),
        },
    )["bare_metal"]["id"]
    # DigitalOcean (swept first) cannot be reached at all; Vultr's listing fails
    resolver.use(lambda name: DEAD if name == "digitalocean" else rest(name))
    clouds.vultr.fail_queue.extend([f"{VULTR_LIST}:503"] * 6)
    with pytest.raises(TeardownIncomplete) as err:
        teardown_steps.sweep(str(rdir), credentials=resolver)
    assert "digitalocean" in str(err.value) and "vultr" in str(err.value)
    assert recorded.id not in clouds.vultr.live()  # by id, though no listing worked
    doc = store.run_facts(rdir)
    assert list(doc.sweep.terminated["vultr"]) == [recorded.id] and len(doc.sweep.errors) == 2
    assert doc.evaluation_cost is not None  # the cost was still recorded
    # once the clouds answer again, the node whose create answer was lost is found by its tag
    resolver.use(lambda name: rest(name))
    killed = teardown_steps.sweep(str(rdir), credentials=resolver)
    assert killed["vultr"] == [lost] and lost not in clouds.vultr.live()
    assert store.read_record(rdir, "sweep")["errors"] == []


def test_the_sweep_keeps_the_slot_of_a_node_whose_termination_failed(rest, clouds, resolver, data_root):
    """A node the sweep could not terminate still runs and bills: its target keeps its node slot (the
    installation's limit still counts it) while the target whose node is gone releases; a later sweep that
    sees the node gone releases it."""
    from bakeoff.clusters import node_slots

    plan = _plan(VULTR, {"name": "mi355x-two"})
    rdir, rid = _run(plan)
    node_slots.record(rdir, {"vultr": 2})
    vultr = VultrProvider(rest("vultr"))
    stuck, fine = (_launch(vultr, plan, slug, rid) for slug in ("mi355x-vllm", "mi355x-two"))
    _record(rdir, "mi355x-vllm", stuck)
    _record(rdir, "mi355x-two", fine)
    assert node_slots.claim(rdir, "mi355x-vllm") and node_slots.claim(rdir, "mi355x-two")
    resolver.use(rest)
    clouds.vultr.fail_queue.extend([f"DELETE /vultr/v2/bare-metals/{stuck.id}:503"] * 20)
    with pytest.raises(TeardownIncomplete, match=stuck.id):
        teardown_steps.sweep(str(rdir), credentials=resolver)
    assert stuck.id in clouds.vultr.live() and fine.id not in clouds.vultr.live()
    assert node_slots._state(rdir, "mi355x-vllm")["released_at"] is None  # still counted: the node runs
    assert node_slots._state(rdir, "mi355x-two")["released_at"]
    clouds.vultr.fail_queue.clear()
    teardown_steps.sweep(str(rdir), credentials=resolver)
    assert stuck.id not in clouds.vultr.live() and node_slots.held(rdir) == {}


def test_a_tampered_record_cannot_aim_the_sweep_at_another_runs_node(rest, clouds, resolver, data_root):
    plan = _plan(VULTR)
    rdir, rid = _run(plan)
    other = _launch(VultrProvider(rest("vultr")), plan, "mi355x-vllm", f"someone-else-{uuid.uuid4().hex[:6]}")
    _record(rdir, "mi355x-vllm", other)
    resolver.use(lambda name: rest(name))
    with pytest.raises(TeardownIncomplete, match="not tagged with run"):
        teardown_steps.sweep(str(rdir), credentials=resolver)
    assert other.id in clouds.vultr.live()
    VultrProvider(rest("vultr")).terminate(other.id)


# --- OCI: a node outside the connection's compartment and region ---------------------------------


def test_oci_node_in_another_compartment_and_region_is_found_and_reaped(oci_creds, oci_fake, data_root):
    plan = _plan(_oci_target(fake_oci.SUBNET_2, fake_oci.COMPARTMENT_2))
    rdir, rid = _run(plan, status="failed")
    node = _launch(OciProvider(oci_creds), plan, "b200-oci", rid)
    raw = oci_fake.instances[node.id]
    assert node.region == fake_oci.SECOND_REGION and raw["compartmentId"] == fake_oci.COMPARTMENT_2
    # OCI's search index trails a launch: a provider from the connection alone cannot see the node yet,
    # one told the plan's targets (the sweep) lists their compartment directly and does
    assert OciProvider(oci_creds).list_tagged(rid) == []
    told = OciProvider(oci_creds)
    told.include(plan.targets)
    assert [i.id for i in told.list_tagged(rid)] == [node.id]
    oci_fake.clock.advance(oci_fake.search_lag_s)  # the hourly reaper comes once the index has caught up
    # a fresh provider from the connection alone (what the reaper builds) finds it
    assert [i.id for i in OciProvider(oci_creds).list_tagged(rid)] == [node.id]
    out = reaper.reap(provider_names=["oci"], credentials_fn=lambda name: oci_creds, run_state=airflow_says)
    assert node.id in {r["id"] for r in out["terminated"]} and not out["errors"]
    assert node.id not in oci_fake.live()


def test_oci_sweep_finds_an_unrecorded_node_in_another_compartment_and_region(oci_creds, oci_fake, resolver, data_root):
    plan = _plan(_oci_target(fake_oci.SUBNET_2, fake_oci.COMPARTMENT_2))
    rdir, rid = _run(plan)
    node = _launch(OciProvider(oci_creds), plan, "b200-oci", rid)  # provision died before recording it
    resolver.use(lambda name: oci_creds)
    assert teardown_steps.sweep(str(rdir), credentials=resolver) == {"oci": [node.id]}
    assert node.id not in oci_fake.live()


def test_one_oci_region_outage_does_not_hide_the_others(oci_creds, oci_fake, data_root):
    plan = _plan(_oci_target(fake_oci.SUBNET, fake_oci.COMPARTMENT_2))
    rdir, rid = _run(plan, status="failed")
    node = _launch(OciProvider(oci_creds), plan, "b200-oci", rid)
    oci_fake.clock.advance(oci_fake.search_lag_s)  # indexed by search
    oci_fake.fail_regions = {fake_oci.SECOND_REGION}
    with pytest.raises(PartialListing) as err:
        OciProvider(oci_creds).list_tagged(rid)
    assert [i.id for i in err.value.found] == [node.id] and any(fake_oci.SECOND_REGION in w for w in err.value.errors)
    out = reaper.reap(provider_names=["oci"], credentials_fn=lambda name: oci_creds, run_state=airflow_says)
    assert node.id in {r["id"] for r in out["terminated"]} and node.id not in oci_fake.live()
    assert any(fake_oci.SECOND_REGION in where for where in out["errors"])  # reported, not hidden


def test_a_run_id_crafted_to_widen_the_oci_search_finds_only_its_own_nodes(oci_creds, oci_fake, data_root):
    plan = _plan(_oci_target(fake_oci.SUBNET_2, fake_oci.COMPARTMENT_2))
    _, victim_run = _run(plan)
    victim = _launch(OciProvider(oci_creds), plan, "b200-oci", victim_run)
    crafted = "x' || freeformTags.key = 'bakeoff_run_id"
    mine = _launch(OciProvider(oci_creds), plan, "b200-oci", crafted)
    oci_fake.clock.advance(oci_fake.search_lag_s)  # both indexed by search
    assert [i.id for i in OciProvider(oci_creds).list_tagged(crafted)] == [mine.id]
    for node in (victim, mine):
        OciProvider(oci_creds).terminate(node.id)


# --- AWS: one region refusing ---------------------------------------------------------------------


def test_one_aws_region_refusing_does_not_hide_the_others(moto_server, data_root):
    from bakeoff.providers.aws import AwsProvider

    moto = moto_server
    creds = {
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "region_name": "us-east-1",
        "endpoint_url": moto.url,
        "regions": ["us-east-1", "us-east-2", "us-west-2"],
    }
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    raw["targets"] = [next(t for t in raw["targets"] if t["provider"] == "aws")]
    raw["targets"][0]["provider_options"]["regions"] = ["us-east-1"]
    plan = plan_from_dict(raw)
    rdir, rid = _run(plan, status="failed")
    node = _launch(AwsProvider(creds), plan, plan.targets[0].slug, rid)
    moto.gate.fail_regions = {"us-east-2"}
    try:
        with pytest.raises(PartialListing) as err:
            AwsProvider(creds).list_tagged(rid)
        assert [i.id for i in err.value.found] == [node.id] and set(err.value.errors) == {"us-east-2"}
        out = reaper.reap(provider_names=["aws"], credentials_fn=lambda name: creds, run_state=airflow_says)
    finally:
        moto.gate.fail_regions = set()
    assert node.id in {r["id"] for r in out["terminated"]} and "aws:us-east-2" in out["errors"]
    assert AwsProvider(creds).describe(node.id).state == "terminated"


# --- states and the reaper task ---------------------------------------------------------------------


@pytest.mark.parametrize("status", ["archive", "some-state-added-later"])
def test_an_unknown_digitalocean_state_counts_as_failed_so_it_is_deleted(status):
    state, _, _ = DigitalOceanProvider.parse(None, {"status": status, "region": {"slug": "atl1"}})
    assert state == "failed"


def test_an_unknown_oci_state_counts_as_failed_so_it_is_deleted(oci_creds):
    import oci

    raw = oci.core.models.Instance(
        id=f"ocid1.instance.oc1.iad.{uuid.uuid4().hex}",
        lifecycle_state="UNKNOWN_ENUM_VALUE",
        freeform_tags={"bakeoff_run_id": "r"},
        shape="BM.GPU.B200.8",
        compartment_id=fake_oci.COMPARTMENT,
        availability_domain=fake_oci.ADS[0],
    )
    assert OciProvider(oci_creds)._to_instance(raw).state == "failed"


def test_the_reaper_task_fails_when_a_cloud_cannot_be_scanned(rest, clouds, monkeypatch, data_root):
    """The reaper DAG asks Airflow (the Task SDK) whether each node's run ended."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    plan = _plan(VULTR)
    rdir, rid = _run(plan, status="failed")
    asked = []

    def get_dagrun_state(dag_id, run_id):
        asked.append((dag_id, run_id))
        return airflow_says(plan.name, run_id)

    monkeypatch.setattr(RuntimeTaskInstance, "get_dagrun_state", staticmethod(get_dagrun_state))
    node = _launch(VultrProvider(rest("vultr")), plan, "mi355x-vllm", rid)
    for cid in ("AWS_DEFAULT", "OCI_DEFAULT"):
        monkeypatch.delenv(f"AIRFLOW_CONN_{cid}", raising=False)
    monkeypatch.setenv(
        "AIRFLOW_CONN_VULTR_DEFAULT",
        json.dumps(
            {"conn_type": "http", "host": rest("vultr")["base_url"], "password": TOKEN, "extra": {"backoff_s": 0.001}}
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_DIGITALOCEAN_DEFAULT",
        json.dumps({"conn_type": "http", "host": DEAD["base_url"], "password": "t", "extra": {"backoff_s": 0.001}}),
    )
    dag = runpy.run_path(str(ROOT / "dags" / "bakeoff_reaper_dag.py"))["bakeoff_reaper"]()
    with pytest.raises(RuntimeError, match="digitalocean"):
        dag.get_task("reap").python_callable()
    assert node.id not in clouds.vultr.live()  # the reachable cloud was still reaped
    assert ("bakeoff", rid) in asked
