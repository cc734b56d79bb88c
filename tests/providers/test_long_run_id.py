"""A run id at Airflow's 250-character maximum provisions, is found by its tags and tears down on every
sandbox cloud: DigitalOcean's 255-character tag limit (which a spelled-out 151-character id already
crosses) is kept by the labels' codec, and the fakes refuse any label past it."""

from __future__ import annotations

import copy

import pytest
from cloud_helpers import launch_args, make_target

from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.providers.aws import AwsProvider
from bakeoff.providers.digitalocean import DigitalOceanProvider
from bakeoff.providers.oci import OciProvider
from bakeoff.providers.tags import LABELS, MAX_LABEL, TAG_RUN, TAG_TARGET
from bakeoff.providers.vultr import VultrProvider
from bakeoff_sandbox import oci as fake_oci
from bakeoff_sandbox.oci import throwaway_api_key

AIRFLOW_RUN_ID_MAX = 250  # airflow.models.dagrun: run_id is a String(250) column


def _long_run_id(tail: str) -> str:
    head = f"manual__2026-11-29T21:00:00+00:00-{tail}-"
    return head + "x" * (AIRFLOW_RUN_ID_MAX - len(head))


@pytest.fixture(scope="module")
def oci_server():
    server = fake_oci.FakeOci(None, boot_s=0.05).start()
    yield server
    server.stop()


def _oci(server) -> tuple[OciProvider, object]:
    key = throwaway_api_key()
    creds = {
        "user": fake_oci.USER,
        "tenancy": fake_oci.TENANCY,
        "fingerprint": key[1],
        "region": fake_oci.REGION,
        "key_content": key[0],
        "compartment_id": fake_oci.COMPARTMENT,
        "service_endpoint": server.url,
        "poll_s": 0.02,
        "backoff_s": 0.01,
    }
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = copy.deepcopy(next(x for x in raw["targets"] if x["provider"] == "aws"))
    t.update(name="b200-vllm", provider="oci", instance_type="BM.GPU.B200.8")
    t["provider_options"] = {"ingress_cidr": "127.0.0.1/32", "subnet_ocid": fake_oci.SUBNET}
    raw["targets"] = [t]
    return OciProvider(creds), plan_from_dict(raw).targets[0]


def test_labels_of_a_250_character_run_id_fit_and_read_back():
    rid = _long_run_id("codec")
    labels = LABELS.encode({TAG_RUN: rid, TAG_TARGET: "mi355x-vllm"})
    assert max(len(label) for label in labels) <= MAX_LABEL
    assert LABELS.decode(labels) == {TAG_RUN: rid, TAG_TARGET: "mi355x-vllm"}
    assert LABELS.run(rid) in labels and LABELS.is_run(LABELS.run(rid))
    assert LABELS.run(rid) != LABELS.run(rid[:-1] + "y")  # two long runs never share a filter label
    short = "manual__2026-11-29T21:00:00+00:00"
    assert LABELS.run(short) == "bakeoff-run-" + LABELS.encode({TAG_RUN: short})[1].split("-", 2)[2]
    # a chunk missing, or the labels shuffled, reads back as nothing rather than a wrong run id
    chunks = [x for x in labels if x.startswith("bakeoff-run0-") or x.startswith("bakeoff-run1-")]
    assert len(chunks) == 2
    assert TAG_RUN not in LABELS.decode([chunks[1]])
    assert LABELS.decode(list(reversed(labels)))[TAG_RUN] == rid


@pytest.mark.parametrize("cloud", ["aws", "oci", "vultr", "digitalocean"])
def test_a_250_character_run_id_provisions_and_tears_down(cloud, aws_creds, rest_creds, fake_clouds, oci_server):
    rid = _long_run_id(cloud)
    assert len(rid) == AIRFLOW_RUN_ID_MAX
    if cloud == "aws":
        p, t = AwsProvider(aws_creds), make_target("aws", regions=["us-east-1"])
    elif cloud == "oci":
        p, t = _oci(oci_server)
    else:
        cls = VultrProvider if cloud == "vultr" else DigitalOceanProvider
        p, t = cls(rest_creds(cloud)), make_target(cloud)
    inst = p.create(t, rid, **launch_args(rid, t))
    listed = p.list_tagged(rid)
    assert [(i.id, i.run_id, i.target) for i in listed] == [(inst.id, rid, t.slug)]
    assert p.terminate(inst.id)
    assert [i for i in p.list_tagged(rid) if i.state != "terminated"] == []
    if cloud in ("vultr", "digitalocean"):
        assert fake_clouds.do.refused == [] and fake_clouds.vultr.refused == []
    if cloud == "digitalocean":  # its firewall, named by the run's label, went with its last droplet
        assert [fw for fw in fake_clouds.do.firewalls.values() if fw["name"].startswith(LABELS.run(rid))] == []
