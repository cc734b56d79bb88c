"""A client fleet through the broker (bench.fleet_celery), with a real redis-server and real Celery
client workers: a reader of the broker learns no key, a message altered in the broker cannot join
the point, a message replayed later cannot join another, and a target whose key members cannot
derive never has its key put on the broker."""

from __future__ import annotations

import base64
import copy
import time

import pytest
from celery import signals

from bakeoff import secrets
from bakeoff.bench.cli import AdhocTarget
from bakeoff.bench.fleet import fleet_celery
from bakeoff.bench.fleet import members as fleet
from bakeoff.bench.load.point import Ctx
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import Slo, Workload
from tests.conftest import FLEET_SECRET
from tests.fleet_fixtures import ArrivalServer, BrokerTap

RUN = "r-broker"


@pytest.fixture
def published():
    """Member messages as they are published; ``edits`` change them first (a broker writer's hand)."""
    seen: list[dict] = []
    edits: list = []

    def on_publish(sender=None, body=None, **_):
        if sender != fleet_celery.TASK:
            return
        for edit in edits:
            edit(body[0][0])
        seen.append(copy.deepcopy(body[0][0]))

    signals.before_task_publish.connect(on_publish, weak=False)
    yield seen, edits
    signals.before_task_publish.disconnect(on_publish)


def _works(server, tmp_path, api_key: str | None, requests: int = 12):
    w = Workload(name="cl", input_len=8, output_len=2, concurrency=[2], requests_per_point=requests, warmup_requests=0)
    ep = Endpoint(target="t", base_url=server.url, model="m", stack="scripted", emulated=True)
    ctx = Ctx(ep, AdhocTarget("t"), w, Slo(), tmp_path, RUN, api_key, True, provenance=False)
    return fleet.member_works(ctx, key=2, repeat=0, concurrency=2, members=2)


def test_a_broker_reader_sees_neither_the_serving_key_nor_the_channel_key(
    celery_fleet, fleet_broker, published, tmp_path
):
    api_key = secrets.api_key(RUN, "t")
    tap = BrokerTap(fleet_broker)
    try:
        with ArrivalServer(api_key=api_key) as server:
            point = fleet_celery.run_celery_fleet(_works(server, tmp_path, api_key))
        seen_by_reader = tap.text()
    finally:
        tap.close()
    assert len(point.records) == 12 and server.refused == 0, "the members did not derive the serving key"
    messages, _ = published
    assert len(messages) == 2 and "bakeoff-clients" in seen_by_reader, "the tap did not see the messages"
    assert messages[0]["mac"] in seen_by_reader  # the tap saw the message itself (its envelope's argsrepr)
    assert "application/json" in seen_by_reader and "pickle" not in seen_by_reader
    channel_key = fleet_celery.channel_key(messages[0]["body"])
    logs = "".join(p.read_text() for p in celery_fleet.logs.values())
    for secret in (api_key, channel_key.hex(), base64.b64encode(channel_key).decode(), FLEET_SECRET):
        assert secret not in seen_by_reader, "a key crossed the broker"
        assert secret not in logs, "a key reached a client worker's log"
    assert channel_key.decode("latin-1") not in seen_by_reader


def test_a_message_altered_in_the_broker_cannot_join_the_point(celery_fleet, published, tmp_path):
    seen, edits = published

    def aim_member_1_elsewhere(msg: dict) -> None:  # e.g. to collect the serving key the member derives
        if msg["body"]["member"] == 1:
            msg["body"]["point"]["endpoint"]["base_url"] = decoy.url

    edits.append(aim_member_1_elsewhere)
    api_key = secrets.api_key(RUN, "t")
    with ArrivalServer(api_key=api_key) as server, ArrivalServer() as decoy:
        with pytest.raises(fleet.FleetError, match="MAC does not match"):
            fleet_celery.run_celery_fleet(_works(server, tmp_path, api_key))
        assert decoy.arrivals == [] and decoy.refused == 0, "an altered member sent requests before authenticating"
        assert server.arrivals == [], "the point started without all its members authenticated"
        # the member that did authenticate was hung up on: its worker slot is free for the next point
        edits.clear()
        t = time.monotonic()
        assert len(fleet_celery.run_celery_fleet(_works(server, tmp_path, api_key)).records) == 12
        assert time.monotonic() - t < 30, "a member of the failed point held its worker slot"


def test_a_replayed_message_cannot_join_a_later_point(celery_fleet, published, tmp_path, monkeypatch):
    seen, edits = published
    with ArrivalServer() as server:
        first = fleet_celery.run_celery_fleet(_works(server, tmp_path, None))
        assert len(first.records) == 12
        sent = len(server.arrivals)
        # the next point listens where the first did: the replayed message reaches a live coordinator
        port = seen[0]["body"]["address"][1]
        monkeypatch.setenv("BAKEOFF_FLEET_BIND", f"127.0.0.1:{port}")
        old = copy.deepcopy(seen[1])
        edits.append(lambda msg: (msg.clear(), msg.update(copy.deepcopy(old))) if msg["body"]["member"] == 1 else None)
        with pytest.raises(fleet.FleetError, match="connection failed: AuthenticationError"):
            fleet_celery.run_celery_fleet(_works(server, tmp_path, None))
        assert len(server.arrivals) == sent, "a replayed member sent requests"


def test_a_target_whose_key_is_its_own_never_reaches_the_broker(celery_fleet, published, tmp_path):
    with ArrivalServer() as server:
        with pytest.raises(fleet.FleetError, match=r"targets\.t: its serving key is its own.*client_fleet to 1"):
            fleet_celery.run_celery_fleet(_works(server, tmp_path, "an-existing-endpoints-own-key"))
    assert published[0] == [], "a message was published for a fleet that cannot derive its key"
