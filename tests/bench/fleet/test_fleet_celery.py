"""A point's members on real Celery client workers (bench.fleet_celery): a real redis-server, real
worker processes, real HTTP to a loopback server that logs arrivals on its own clock and takes only
the run's derived serving key. The merged point is what a local fleet's is (the schedule once, clocks
corrected, one budget, client-bound from any member); a member whose worker dies fails the point
instead of hanging it; bad settings are refused naming the variable."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from bakeoff import secrets
from bakeoff.bench.cli import AdhocTarget
from bakeoff.bench.fleet import fleet_celery
from bakeoff.bench.fleet import members as fleet
from bakeoff.bench.load.loadgen import arrival_offsets
from bakeoff.bench.load.point import Ctx
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import Slo, Workload
from tests.conftest import FLEET_SECRET
from tests.fleet_fixtures import ArrivalServer, client_workers

RUN = "r-celery"
SKEW_S = 5.0


def _ctx(server, w: Workload, tmp_path, api_key: str | None) -> Ctx:
    ep = Endpoint(target="t", base_url=server.url, model="m", stack="scripted", emulated=True)
    return Ctx(ep, AdhocTarget("t"), w, Slo(), tmp_path, RUN, api_key, True, provenance=False)


@pytest.mark.slow
def test_open_loop_members_on_two_workers_send_the_schedule_once_on_one_clock(celery_fleet, tmp_path):
    key = secrets.api_key(RUN, "t")
    w = Workload(name="ol", input_len=8, output_len=2, load="rate", rates=[200], requests_per_point=40)
    offsets = [float(o) for o in arrival_offsets(40, 200, "poisson", 1.0, seed=0)]
    with ArrivalServer(api_key=key) as server:
        works = fleet.member_works(_ctx(server, w, tmp_path, key), key=200_000, repeat=0, offsets=offsets, members=2)
        works[1].clock_skew_s = SKEW_S
        point = fleet_celery.run_celery_fleet(works)
    recs = point.records
    assert server.refused == 0 and all(r.error is None for r in recs), "a member did not derive the serving key"
    assert [r.index for r in recs] == list(range(40)) and [r.scheduled_offset for r in recs] == offsets
    names = {celery_fleet.worker_name(n) for n in ("clients-a", "clients-b")}
    assert {m.where for m in point.members} == names, "the members did not run on both client workers"
    assert point.figures["client_hosts"] == sorted(names)
    by = {r.member: r for r in point.members}
    assert by[1].offset_s == pytest.approx(-SKEW_S, abs=0.01) and abs(by[0].offset_s) < 0.01
    sent, arrived = np.sort([r.send_time for r in recs]), np.sort(server.arrivals)
    assert np.abs(sent - arrived).max() < 0.1, "a member's send times were not put on the one clock"
    started = np.asarray([r.send_time - r.start_offset for r in recs])
    assert np.abs(started - point.start_time).max() < 0.02


@pytest.mark.slow
def test_closed_loop_members_keep_one_budget_and_a_stalled_one_marks_the_point(celery_fleet, tmp_path):
    w = Workload(name="cl", input_len=8, output_len=2, concurrency=[5], requests_per_point=40, warmup_requests=0)
    with ArrivalServer() as server:
        works = fleet.member_works(_ctx(server, w, tmp_path, None), key=5, repeat=0, concurrency=5, members=2)
        works[0].stall_ms = 150
        point = fleet_celery.run_celery_fleet(works)
    assert [r.index for r in point.records] == list(range(40))
    assert server.peak <= 5, f"{server.peak} requests in flight at the server: over the point's budget of 5"
    by = {r.member: r for r in point.members}
    assert by[0].figures["client_stalled"] and point.figures["client_bound"]
    assert by[0].dealt == 24 and by[0].records + by[1].records == 40


@pytest.mark.slow
def test_a_member_whose_worker_dies_fails_the_point_without_hanging_it(fleet_broker, tmp_path, monkeypatch):
    url = fleet_broker.rsplit("/", 1)[0] + "/3"  # its own broker database: these workers are killed
    monkeypatch.setenv("BAKEOFF_FLEET_BROKER", url)
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", FLEET_SECRET)
    env = {"BAKEOFF_SECRET_KEY": FLEET_SECRET}
    w = Workload(name="cl", input_len=8, output_len=2, concurrency=[2], requests_per_point=400, warmup_requests=0)
    with client_workers(url, ["doomed-a", "doomed-b"], tmp_path, env) as workers, ArrivalServer(0.05) as server:
        works = fleet.member_works(_ctx(server, w, tmp_path, None), key=2, repeat=0, concurrency=2, members=2)

        def kill_when_measuring() -> None:
            while len(server.arrivals) < 6:
                time.sleep(0.05)
            workers.kill("doomed-b")

        threading.Thread(target=kill_when_measuring, daemon=True).start()
        t = time.monotonic()
        with pytest.raises(fleet.FleetError, match=r"member \d on doomed-b@\S+: (channel closed|ended without)"):
            fleet_celery.run_celery_fleet(works)
    assert time.monotonic() - t < 60, "the point hung on a dead member"


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"BAKEOFF_FLEET_BROKER": "amqp://guest@rabbit//"}, r"BAKEOFF_FLEET_BROKER: scheme 'amqp'.*redis://"),
        ({"BAKEOFF_FLEET_BIND": "bench-1:80"}, r"BAKEOFF_FLEET_BIND='bench-1:80': expected an IP address"),
        ({"BAKEOFF_FLEET_BIND": "10.0.0.5:99999"}, r"BAKEOFF_FLEET_BIND='10.0.0.5:99999'"),
        ({"BAKEOFF_FLEET_BIND": "0.0.0.0"}, r"BAKEOFF_FLEET_ADVERTISE: the coordinator listens on every interface"),
        ({"BAKEOFF_FLEET_ADVERTISE": "http://x:1"}, r"BAKEOFF_FLEET_ADVERTISE='http://x:1': expected a host name"),
        ({"BAKEOFF_FLEET_BIND": "192.0.2.1"}, r"BAKEOFF_FLEET_BIND: cannot listen on 192.0.2.1:0"),
    ],
)
def test_bad_fleet_settings_are_refused_naming_the_variable(env, error, tmp_path, monkeypatch):
    monkeypatch.setenv("BAKEOFF_FLEET_BROKER", "redis://127.0.0.1:9/0")  # never reached: refused first
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    w = Workload(name="x", input_len=8, output_len=2, concurrency=[2], requests_per_point=4)
    ep = Endpoint(target="t", base_url="http://127.0.0.1:9/", model="m", stack="scripted", emulated=True)
    ctx = Ctx(ep, AdhocTarget("t"), w, Slo(), tmp_path, RUN, None, True, provenance=False)
    works = fleet.member_works(ctx, key=2, repeat=0, concurrency=2, members=2)
    with pytest.raises(fleet_celery.FleetConfigError, match=error):
        fleet_celery.run_celery_fleet(works)


def test_the_advertised_address_is_the_bound_one_unless_set(monkeypatch):
    monkeypatch.delenv("BAKEOFF_FLEET_ADVERTISE", raising=False)
    monkeypatch.setenv("BAKEOFF_FLEET_BIND", "[::1]:4711")
    assert fleet_celery.bind_address() == ("::1", 4711) and fleet_celery.advertise_host("::1") == "::1"
    monkeypatch.setenv("BAKEOFF_FLEET_ADVERTISE", "@hostname")
    assert fleet_celery.advertise_host("0.0.0.0") == socket.gethostname()
    monkeypatch.setenv("BAKEOFF_FLEET_ADVERTISE", "bench-1.internal")
    assert fleet_celery.advertise_host("0.0.0.0") == "bench-1.internal"


def test_the_point_travels_as_json_and_comes_back_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", FLEET_SECRET)
    w = Workload(name="x", input_len=8, output_len=2, load="rate", rates=[4], requests_per_point=4, max_point_s=9)
    ep = Endpoint(target="t", base_url="http://127.0.0.1:9/", model="m", stack="scripted", emulated=True)
    ctx = Ctx(ep, AdhocTarget("t", 8), w, Slo(), tmp_path, RUN, secrets.api_key(RUN, "t"), True, provenance=False)
    ctx.prompt_seed = 7
    (work,) = fleet.member_works(ctx, key=4, repeat=1, offsets=[0.0, 0.1, 0.2, 0.3], members=1)
    point = fleet_celery.point_doc(work)
    msg = fleet_celery.message(point, work, ("127.0.0.1", 4711))
    back, address, key, guarded = fleet_celery.work_from(msg)
    assert back.ctx.workload == w and back.ctx.endpoint == ep and back.ctx.target.gpus_used == 8
    assert back.ctx.api_key == ctx.api_key and back.ctx.prompt_seed == 7 and back.offsets == work.offsets
    assert (back.key, back.repeat, back.member, back.members) == (4, 1, 0, 1) and address == ("127.0.0.1", 4711)
    assert key == fleet_celery.channel_key(msg["body"]) and len(key) == 32 and guarded == []
