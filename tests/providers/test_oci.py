"""OCI lifecycle against the local fake of its Core API: the real oci SDK signs and sends every call.

Tags, user-data, the per-run network security group, idempotent retry, capacity failover across
availability domains, addresses through the sandbox address map, terminate + cleanup, pagination,
and the errors a person sees for incomplete credentials or plan options.
"""

from __future__ import annotations

import base64
import copy
import time

import httpx
import pytest
from cloud_helpers import launch_args, new_run_id

from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.providers import CapacityError, ProviderError, get_provider
from bakeoff.providers.base import TAG_RUN
from bakeoff.providers.oci import OciProvider
from bakeoff.providers.oci.api import TAGS, retry_token
from bakeoff.providers.oci.network import nsg_name
from bakeoff.serving import userdata
from bakeoff_sandbox import oci as fake_oci
from bakeoff_sandbox.oci import throwaway_api_key

AD1, AD2, AD3 = fake_oci.ADS
CIDR = "127.0.0.1/32"


@pytest.fixture(scope="module")
def api_key():
    return throwaway_api_key()


@pytest.fixture(scope="module")
def fake():
    server = fake_oci.FakeOci(None, boot_s=0.05).start()
    yield server
    server.stop()


@pytest.fixture
def creds(fake, api_key):
    yield {
        "user": fake_oci.USER,
        "tenancy": fake_oci.TENANCY,
        "fingerprint": api_key[1],
        "region": fake_oci.REGION,
        "key_content": api_key[0],
        "compartment_id": fake_oci.COMPARTMENT,
        "service_endpoint": fake.url,
        "poll_s": 0.02,
        "backoff_s": 0.01,
    }
    fake.denied, fake.fail_queue, fake.page_size, fake.terminate_s = set(), [], 50, 0.0


def make_target(name: str = "b200-vllm", **options):
    """The sandbox plan's EC2 target moved to OCI (BM.GPU.B200.8), with provider_options set."""
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = copy.deepcopy(next(x for x in raw["targets"] if x["provider"] == "aws"))
    t.update(name=name, provider="oci", instance_type="BM.GPU.B200.8")
    t["provider_options"] = {"ingress_cidr": CIDR, "subnet_ocid": fake_oci.SUBNET, **options}
    raw["targets"] = [t]
    return plan_from_dict(raw).targets[0]


def _run_nsgs(fake, run_id):
    return [g for g in fake.nsgs.values() if g["freeformTags"].get("bakeoff_run_id") == run_id]


def test_registry_knows_oci(creds):
    assert isinstance(get_provider("oci", creds), OciProvider)


def test_launch_tags_user_data_image_and_security_group(creds, fake):
    p, t, rid = OciProvider(creds), make_target(), new_run_id()
    args = launch_args(rid, t)
    inst = p.create(t, rid, **args)
    raw = fake.instances[inst.id]
    assert inst.id.startswith("ocid1.instance.oc1.iad.") and inst.region == "us-ashburn-1" and inst.state == "pending"
    assert raw["freeformTags"] == {
        "bakeoff_run_id": rid,
        "bakeoff_target": t.slug,
        "bakeoff_plan": "p",
        "bakeoff_expires_at": args["tags"]["bakeoff:expires_at"],
        "bakeoff_installation": args["tags"]["bakeoff:installation"],
        "bakeoff_port": "8000",
    }
    assert inst.tags["bakeoff:run_id"] == rid and inst.run_id == rid and inst.target == t.slug and inst.port == 8000
    assert (
        raw["shape"] == "BM.GPU.B200.8"
        and raw["availabilityDomain"] == AD1
        and raw["compartmentId"] == fake_oci.COMPARTMENT
    )
    # the newest platform image for the shape, and the plan's boot volume
    assert raw["sourceDetails"] == {
        "sourceType": "image",
        "imageId": fake_oci.IMAGE,
        "bootVolumeSizeInGBs": t.provider_options.root_volume_gb,
    }
    script = base64.b64decode(raw["metadata"]["user_data"]).decode()
    assert userdata.target_from_userdata(script)["target"]["name"] == t.name
    assert userdata.api_key_from_userdata(script) == args["spec"]["api_key"]
    assert "shutdown -h +" in script and "ssh_authorized_keys" not in raw["metadata"]
    # one security group for the run+target: only the serving and agent ports, only from the plan's CIDR
    [nsg] = _run_nsgs(fake, rid)
    assert nsg["displayName"] == nsg_name(rid, t.slug) and nsg["vcnId"] == fake_oci.VCN
    rules = fake.rules[nsg["id"]]
    assert sorted(
        (
            r["direction"],
            r["protocol"],
            r["source"],
            r["sourceType"],
            r["tcpOptions"]["destinationPortRange"]["min"],
            r["tcpOptions"]["destinationPortRange"]["max"],
        )
        for r in rules
    ) == [("INGRESS", "6", CIDR, "CIDR_BLOCK", 8000, 8000), ("INGRESS", "6", CIDR, "CIDR_BLOCK", 8089, 8089)]
    [vnic] = [v for v in fake.vnics.values() if v["_instance"] == inst.id]
    assert vnic["nsgIds"] == [nsg["id"]] and vnic["subnetId"] == fake_oci.SUBNET and vnic["_public"]
    ready = p.wait_ready(inst, 10)
    assert ready.state == "running" and ready.host == vnic["_public"] and ready.port == 8000
    assert ready.agent_port == 8089
    assert p.terminate(inst.id) is True


def test_plan_image_is_used_as_given(creds, fake):
    p, rid = OciProvider(creds), new_run_id()
    t = make_target(image_ocid=fake_oci.OLD_IMAGE)
    inst = p.create(t, rid, **launch_args(rid, t))
    assert fake.instances[inst.id]["sourceDetails"]["imageId"] == fake_oci.OLD_IMAGE
    p.terminate(inst.id)


def test_retried_create_reuses_the_instance(creds, fake, monkeypatch):
    p, t, rid = OciProvider(creds), make_target(), new_run_id()
    args = launch_args(rid, t)  # built once per launch (the pipeline keeps its expiry for a retry)
    a = p.create(t, rid, **args)
    b = OciProvider(creds).create(t, rid, **args)  # a retried task: fresh process, same run
    assert a.id == b.id
    # even when the lookup by tag misses it (eventual consistency), the retry token stops a second launch
    late = OciProvider(creds)
    monkeypatch.setattr(late, "_list", lambda *a, **k: [])
    assert late.create(t, rid, **args).id == a.id
    assert [i for i in fake.live() if fake.instances[i]["freeformTags"]["bakeoff_run_id"] == rid] == [a.id]
    assert len(_run_nsgs(fake, rid)) == 1
    assert retry_token(rid, t.slug, AD1) != retry_token(rid, t.slug, AD2) and len(retry_token(rid, t.slug, AD1)) <= 64
    p.terminate(a.id)


def test_capacity_fails_over_to_the_next_availability_domain(creds, fake):
    fake.denied = {AD1, AD2}
    p, rid = OciProvider(creds), new_run_id()
    t = make_target(availability_domains=[AD1, AD2, AD3])
    inst = p.create(t, rid, **launch_args(rid, t))
    assert inst.zone == AD3
    p.terminate(inst.id)
    # no availability_domains in the plan: every domain of the region, in order
    fake.denied = {AD1}
    rid = new_run_id()
    inst = p.create(make_target(), rid, **launch_args(rid, make_target()))
    assert inst.zone == AD2
    p.terminate(inst.id)


def test_capacity_everywhere_refused_names_what_was_tried(creds, fake):
    fake.denied = {AD1, AD2}
    p, rid = OciProvider(creds), new_run_id()
    t = make_target(availability_domains=[AD1, AD2])
    with pytest.raises(CapacityError) as e:
        p.create(t, rid, **launch_args(rid, t))
    msg = str(e.value)
    assert f"{AD1} (InternalError: Out of host capacity.)" in msg and f"{AD2} (InternalError" in msg
    assert "targets.b200-vllm.provider_options" in msg
    assert p.list_tagged(rid) == [] and _run_nsgs(fake, rid) == []  # the unused security group went too


def test_wait_ready_reads_the_address_map_and_boots_the_emulator(creds, tmp_path):
    from bakeoff_sandbox.backing import Backing
    from bakeoff_sandbox.clouds import Clouds

    backing = Backing(tmp_path)
    clouds, oci_fake = Clouds(backing).start(), fake_oci.FakeOci(backing, boot_s=0.05).start()
    try:
        p = OciProvider({**creds, "service_endpoint": oci_fake.url, "address_map_url": f"{clouds.url}/address"})
        t, rid = make_target(), new_run_id()
        args = launch_args(rid, t)
        args["spec"]["agent"] = {"url": "http://127.0.0.1:9/client.zip", "sha256": "0" * 64, "requirements": []}
        inst = p.create(t, rid, **args)
        assert ("oci", inst.id) in backing.running()  # booted from the decoded user_data
        ready = p.wait_ready(inst, 20)
        host, port = backing.address("oci", inst.id)
        assert (ready.host, ready.port) == (host, port) and port != 8000
        assert ready.agent_port == backing.agent_port("oci", inst.id) and ready.agent_port
        assert p.terminate(inst.id) is True
        assert backing.address("oci", inst.id) is None and oci_fake.live() == []
    finally:
        backing.close()
        oci_fake.stop()
        clouds.stop()


def test_terminate_and_cleanup_leave_no_instance_and_no_security_group(creds, fake):
    fake.terminate_s = 0.3  # a terminating node's VNIC stays in its group for a while
    p, t, rid = OciProvider(creds), make_target(), new_run_id()
    inst = p.create(t, rid, **launch_args(rid, t))
    mine = lambda tags: tags.get(TAG_RUN) == rid  # noqa: E731
    assert p.cleanup(mine) == [] and len(_run_nsgs(fake, rid)) == 1  # in use: kept
    assert p.terminate(inst.id) is True
    assert p.terminate(inst.id) is False  # already terminating
    with pytest.raises(ProviderError, match="ended before it was ready"):
        p.wait_ready(inst, 5)
    assert p.describe(inst.id).state == "terminated" and inst.id not in fake.live()
    assert len(_run_nsgs(fake, rid)) == 1  # still holds the VNIC: next pass
    time.sleep(0.35)
    [nsg] = _run_nsgs(fake, rid)
    other = new_run_id()  # a create killed after it made its group: an unused group of another run
    orphan = p._ensure_nsg(t, other, fake_oci.COMPARTMENT, fake_oci.REGION, TAGS.encode({TAG_RUN: other}))
    assert p.cleanup(mine) == [nsg["id"]]  # select picks only that run's groups
    assert _run_nsgs(fake, rid) == [] and p.list_tagged(rid) == [] and orphan in fake.nsgs
    assert p.cleanup(lambda tags: tags.get(TAG_RUN) == other) == [orphan] and orphan not in fake.nsgs
    fake.terminate_s = 0.0  # a node gone at once: terminate drops its group itself
    kept = p.create(t, other, **launch_args(other, t))
    assert len(_run_nsgs(fake, other)) == 1
    assert p.terminate(kept.id) is True and _run_nsgs(fake, other) == []
    assert p.terminate("ocid1.instance.oc1.iad.amaaaaaanosuchinstance000000000000000000000000000000") is False
    assert p.describe("ocid1.instance.oc1.iad.amaaaaaanosuchinstance000000000000000000000000000000") is None


def test_list_tagged_follows_pagination(creds, fake):
    fake.page_size = 2
    p, rid = OciProvider(creds), new_run_id()
    made = [p.create(t, rid, **launch_args(rid, t)) for t in (make_target(f"b200-{n}") for n in range(5))]
    other = new_run_id()
    stray = p.create(make_target("b200-other"), other, **launch_args(other, make_target("b200-other")))
    found = p.list_tagged(rid)
    assert sorted(i.id for i in found) == sorted(i.id for i in made)
    assert {i.target for i in found} == {f"b200-{n}" for n in range(5)}
    assert {i.id for i in p.list_tagged(None)} >= {i.id for i in made} | {stray.id}
    for i in [*made, stray]:
        p.terminate(i.id)
    assert p.list_tagged(rid) == []


def test_incomplete_credentials_name_the_field_never_the_key(creds, monkeypatch):
    monkeypatch.delenv("OCI_REGION", raising=False)
    incomplete = {k: v for k, v in creds.items() if k not in ("fingerprint", "region")}
    with pytest.raises(ProviderError) as e:
        OciProvider(incomplete)
    msg = str(e.value)
    assert "oci_default" in msg and "extra.fingerprint missing" in msg and "extra.region missing" in msg
    assert "PRIVATE KEY" not in msg and creds["key_content"][40:80] not in msg
    with pytest.raises(ProviderError, match="password .*missing"):
        OciProvider({k: v for k, v in creds.items() if k != "key_content"})
    broken = creds["key_content"].replace("\n", "", 3)[:400]
    with pytest.raises(ProviderError) as e:
        OciProvider({**creds, "key_content": broken})
    assert "PEM" in str(e.value) and broken[40:80] not in str(e.value)
    # a PEM pasted with escaped newlines (one-line environment variable) still works
    assert OciProvider({**creds, "key_content": creds["key_content"].replace("\n", "\\n")}).list_tagged("none") == []


def test_missing_plan_options_name_the_field(creds, fake):
    p, rid = OciProvider(creds), new_run_id()
    before = fake.live()
    for missing in ("subnet_ocid", "ingress_cidr"):
        t = make_target(**{missing: None})
        with pytest.raises(ProviderError, match=rf"targets\.b200-vllm\.provider_options\.{missing}:"):
            p.create(t, rid, **launch_args(rid, t))
    t = make_target(regions=["us-ashburn-1", "us-phoenix-1"])
    with pytest.raises(
        ProviderError, match=r"provider_options\.regions: an OCI target launches in its subnet's region"
    ):
        p.create(t, rid, **launch_args(rid, t))
    assert fake.live() == before and _run_nsgs(fake, rid) == []


def test_the_fake_refuses_unsigned_requests(fake):
    r = httpx.get(f"{fake.url}/20160918/instances", params={"compartmentId": fake_oci.COMPARTMENT})
    assert r.status_code == 401 and r.json()["code"] == "NotAuthenticated"


def test_a_used_retry_token_with_a_changed_body_is_refused_and_expires_after_a_day(creds, fake, monkeypatch):
    """OCI's rule, held by the fake: a retry must resend the same request; after 24 h the token is new."""
    p, t, rid = OciProvider(creds), make_target(), new_run_id()
    monkeypatch.setattr(p, "_list", lambda *a, **k: [])  # the lookup by tag misses: only the token decides
    first = p.create(t, rid, **launch_args(rid, t))
    with pytest.raises(ProviderError, match="409 Conflict: The opc-retry-token was already used"):
        p.create(t, rid, **launch_args(rid, t))  # same token, another expiry and key in the body
    assert [i for i in fake.live() if fake.instances[i]["freeformTags"]["bakeoff_run_id"] == rid] == [first.id]
    p.terminate(first.id)
    fake.clock.advance(fake_oci.RETRY_TOKEN_S + 1)
    again = p.create(t, rid, **launch_args(rid, t))
    assert again.id != first.id
    p.terminate(again.id)


def test_a_re_provision_after_terminate_gets_a_new_node(creds, fake, monkeypatch):
    """The token counts launches: launch 1 after a terminated launch 0 is a new node, not the old one
    handed back (OCI would replay the terminated instance within 24 hours) nor a 409."""
    p, t, rid = OciProvider(creds), make_target(), new_run_id()
    args = launch_args(rid, t)
    first = p.create(t, rid, **args)
    assert p.terminate(first.id) is True
    monkeypatch.setattr(p, "_list", lambda *a, **k: [])
    relaunch = launch_args(rid, t)
    second = p.create(t, rid, tags=relaunch["tags"], spec={**relaunch["spec"], "launch": 1})
    assert second.id != first.id and fake.instances[second.id]["_terminated"] is None
    assert retry_token(rid, t.slug, AD1, 1) != retry_token(rid, t.slug, AD1)
    p.terminate(second.id)


def test_each_shape_in_an_availability_domain_launches_with_its_own_retry_token(creds, fake):
    """Instance-type fallback asks the same domain for a second shape: another request, so another token
    (reusing the refused first shape's would be answered as that request); a retry of one keeps its own."""
    rid, slug = new_run_id(), make_target().slug
    mi355x, b200 = (retry_token(rid, slug, AD1, 0, s) for s in ("BM.GPU.MI355X.8", "BM.GPU.B200.8"))
    assert mi355x != b200 and len(mi355x) == len(b200) == 64
    assert retry_token(rid, slug, AD1, 0, "BM.GPU.B200.8") == b200  # a retried launch: the same token
    assert retry_token(rid, slug, AD1, 1, "BM.GPU.B200.8") != b200 != retry_token(rid, slug, AD2, 0, "BM.GPU.B200.8")
    p, t = OciProvider(creds), make_target()
    inst = p.create(t, rid, **launch_args(rid, t))
    try:  # the launch sent its shape's token (the fake keeps the tokens of the creates it answered)
        sent = {token for _, token in fake._tokens}
        assert retry_token(rid, t.slug, AD1, 0, t.instance_type) in sent
        assert retry_token(rid, t.slug, AD1) not in sent
    finally:
        p.terminate(inst.id)


def test_a_service_limit_reached_is_a_capacity_refusal_naming_the_limit(creds, fake):
    """The fake holds the tenancy's service limits; a launch past one is OCI's 400 LimitExceeded."""
    p, t, rid = OciProvider(creds), make_target(), new_run_id()
    fake.limits["gpu-b200-count"] = 0
    try:
        with pytest.raises(CapacityError, match="LimitExceeded: The following service limits were exceeded: gpu-b200"):
            p.create(t, rid, **launch_args(rid, t))
    finally:
        fake.limits["gpu-b200-count"] = 64
    assert not [i for i in fake.live() if fake.instances[i]["freeformTags"]["bakeoff_run_id"] == rid]


def test_the_search_index_trails_the_instances(creds, fake):
    """Resource Search is eventually consistent: a fresh node is not found, a terminated one still shown."""
    p, t, rid = OciProvider(creds), make_target(), new_run_id()
    inst = p.create(t, rid, **launch_args(rid, t))
    assert p._search(fake_oci.REGION, rid) == []
    fake.clock.advance(fake.search_lag_s)
    assert [h.identifier for h in p._search(fake_oci.REGION, rid)] == [inst.id]
    p.terminate(inst.id)
    assert [h.lifecycle_state for h in p._search(fake_oci.REGION, rid)] != ["TERMINATED"]
    assert [i.id for i in p.list_tagged(rid)] == []  # the instance's own state decides, not the index
