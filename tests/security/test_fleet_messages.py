"""A client fleet's member messages (bench.fleet_celery) and channel (bench.fleet) against a broker
writer: every field a member acts on is signed, each member proves its own key, a proof cannot be
reflected, the coordinator's rebinding guard reaches the member, and hostile channel values (deep
nesting, NaN clocks) fail the point with a FleetError.

The client worker here is a real separate Python process running the Celery task's function on
the message as the broker would hand it over (JSON), with its own environment; only Redis is left
out (tests/security/test_fleet_broker.py runs the same over a real redis-server where it is
installed)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
from multiprocessing.connection import Listener, Pipe

import pytest

from bakeoff import secrets
from bakeoff.bench.cli import AdhocTarget
from bakeoff.bench.fleet import fleet_celery
from bakeoff.bench.fleet import members as fleet
from bakeoff.bench.load.point import Ctx
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import Slo, Workload
from bakeoff.serving import egress
from tests.conftest import FLEET_SECRET
from tests.fleet_fixtures import ArrivalServer, ThreadMember

# slow (make test runs it, make test-unit leaves it out): each test starts Celery client workers as
# processes, 12-19 s a test on the 2-core machine
pytestmark = pytest.mark.slow

RUN = "r-messages"
_WORKER = (
    "import json, sys\n"
    "from bakeoff.bench.fleet import fleet_celery\n"
    "class T:\n"
    "    class request: hostname = 'client@test'\n"
    "fleet_celery._fleet_member(T(), json.loads(sys.stdin.read()))\n"
)


class _Result:
    """What CeleryMember reads of an AsyncResult, for a member run as a separate process."""

    def __init__(self, proc: subprocess.Popen, n: int) -> None:
        self.proc, self.id, self.backend = proc, f"task-{n}", None

    @property
    def state(self) -> str:
        rc = self.proc.poll()
        return "STARTED" if rc is None else ("SUCCESS" if rc == 0 else "FAILURE")

    @property
    def result(self) -> str:
        return self.proc.stderr.read().decode()[-400:] if self.proc.stderr else ""

    def revoke(self, terminate: bool = False) -> None:
        self.proc.kill()


class _Broker:
    """Stands in for the Celery client app: each published message, after ``edits`` (a broker
    writer's hand), runs on a fresh client-worker process without the coordinator's environment."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.edits: list = []
        self.procs: list[subprocess.Popen] = []

    def send_task(self, name, args, queue, expires):
        msg = json.loads(json.dumps(args[0]))  # what the broker hands over: JSON
        for edit in self.edits:
            edit(msg)
        self.sent.append(copy.deepcopy(msg))
        env = {k: v for k, v in os.environ.items() if k != egress.GUARD_ENV}
        proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        proc.stdin.write(json.dumps(msg).encode())
        proc.stdin.close()
        self.procs.append(proc)
        return _Result(proc, len(self.procs))


@pytest.fixture
def broker(monkeypatch):
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", FLEET_SECRET)
    monkeypatch.setenv("BAKEOFF_FLEET_BROKER", "redis://127.0.0.1:9/0")  # never reached: the stand-in takes it
    monkeypatch.delenv("BAKEOFF_FLEET_BIND", raising=False)
    monkeypatch.delenv("BAKEOFF_FLEET_ADVERTISE", raising=False)
    b = _Broker()
    monkeypatch.setattr(fleet_celery, "_client_app", lambda url: b)
    yield b
    for p in b.procs:
        p.kill()
        p.wait()


def _works(url: str, tmp_path, api_key: str | None, requests: int = 8):
    w = Workload(name="cl", input_len=8, output_len=2, concurrency=[2], requests_per_point=requests, warmup_requests=0)
    ep = Endpoint(target="t", base_url=url, model="m", stack="scripted", emulated=True)
    ctx = Ctx(ep, AdhocTarget("t"), w, Slo(), tmp_path, RUN, api_key, True, provenance=False)
    return fleet.member_works(ctx, key=2, repeat=0, concurrency=2, members=2)


def test_an_unaltered_point_runs_on_separate_client_workers(broker, tmp_path):
    api_key = secrets.api_key(RUN, "t")
    with ArrivalServer(api_key=api_key) as server:
        point = fleet_celery.run_celery_fleet(_works(server.url, tmp_path, api_key))
    assert len(point.records) == 8 and server.refused == 0
    assert point.figures["client_bound"] is False and point.figures["client_hosts"] == ["client@test"]


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda m: m["body"]["fault"].update(stall_ms=400.0), id="fault.stall_ms (client_bound)"),
        pytest.param(lambda m: m["body"].update(address=["127.0.0.1", 9]), id="address (a key-less relay)"),
        pytest.param(lambda m: m["body"].update(member=0), id="member (another member's slot)"),
        pytest.param(lambda m: m["body"].update(guarded=["unrelated.example"]), id="guarded hosts replaced"),
        pytest.param(lambda m: m["body"]["point"].update(run_id="another-run"), id="point.run_id"),
    ],
)
def test_a_member_message_altered_in_the_broker_is_refused_before_any_request(broker, tmp_path, edit):
    broker.edits.append(lambda m: edit(m) if m["body"]["member"] == 1 else None)
    api_key = secrets.api_key(RUN, "t")
    with ArrivalServer(api_key=api_key) as server:
        with pytest.raises(fleet.FleetError, match="MAC does not match"):
            fleet_celery.run_celery_fleet(_works(server.url, tmp_path, api_key))
    assert server.arrivals == [] and server.refused == 0, "the point measured with an altered member"


def test_an_expired_message_is_refused_before_any_connection(monkeypatch):
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", FLEET_SECRET)
    body = {"v": fleet_celery.VERSION, "expires_at": 1.0}
    msg = {"body": body, "mac": fleet_celery._mac(body)}
    with pytest.raises(fleet.FleetError, match="expired"):
        fleet_celery.work_from(msg)


def test_a_message_signed_by_another_installation_is_refused(monkeypatch):
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", "another-installation-" + "9" * 32)
    body = {"v": fleet_celery.VERSION, "expires_at": 9e12}
    msg = {"body": body, "mac": fleet_celery._mac(body)}
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", FLEET_SECRET)
    with pytest.raises(fleet.FleetError, match="MAC does not match"):
        fleet_celery.work_from(msg)


def test_the_coordinators_rebinding_guard_reaches_members_on_client_workers(broker, tmp_path, monkeypatch):
    monkeypatch.setenv(egress.GUARD_ENV, "localhost")  # the plan's static host, guarded since start_run
    with ArrivalServer() as server:
        url = server.url.replace("127.0.0.1", "localhost")  # which now resolves to loopback
        try:
            outcome = [r.error or "" for r in fleet_celery.run_celery_fleet(_works(url, tmp_path, None)).records]
        except fleet.FleetError as e:
            outcome = [str(e)]
    assert server.arrivals == [], "a member on a client worker connected to the rebound address"
    assert outcome and all("internal address" in o or "EgressRefused" in o for o in outcome), outcome[:2]


def test_each_member_proves_its_own_key_once(tmp_path):
    """A second connection proving member 0's key (a copy of its message) is not member 1."""
    key0 = b"0" * 32
    done = threading.Event()

    def launch(work, address):
        def run() -> None:
            try:
                with fleet.connect(address, key0):
                    done.wait(10)
            except Exception:  # noqa: BLE001 - the copy's side of the refusal
                pass

        return ThreadMember(run), key0 if work.member == 0 else b"1" * 32

    try:
        with pytest.raises(fleet.FleetError, match="connection failed: AuthenticationError"):
            fleet.run_fleet(_works("http://127.0.0.1:9/", tmp_path, None), launch=launch)
    finally:
        done.set()


def test_a_listener_without_the_key_cannot_reflect_a_members_proof_back_to_it():
    """Two copies of one member message (a replay) connect to a key-less listener on the old
    address, which hands each copy's challenge to the other: neither accepts the coordinator."""
    key = os.urandom(32)
    outcomes: list[str] = []
    with Listener(("127.0.0.1", 0)) as listener:

        def member() -> None:
            try:
                fleet.connect(listener.address, key).close()
                outcomes.append("accepted")
            except Exception as e:  # noqa: BLE001 - what the member concluded
                outcomes.append(type(e).__name__)

        threads = [threading.Thread(target=member, daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        a, b = listener.accept(), listener.accept()
        challenge = os.urandom(32)
        a.send_bytes(challenge)
        answer_a = a.recv_bytes()
        b.send_bytes(answer_a[32:])  # a's own challenge, put to b as the coordinator's
        answer_b = b.recv_bytes()
        a.send_bytes(answer_b[:32])  # b's proof of a's challenge, handed back to a
        for t in threads[:1]:
            t.join(15)
        b.close()
        threads[1].join(15)
    assert outcomes[0] == "AuthenticationError", "a member accepted a reflected proof as the coordinator's"


def test_a_deeply_nested_channel_message_is_a_fleet_error(tmp_path):
    a, b = Pipe()
    a.send_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(fleet.FleetError, match="nested too deep"):
        fleet._recv(b, 5.0, "member 0")


def test_a_deeply_nested_broker_message_is_a_fleet_error(monkeypatch):
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", FLEET_SECRET)
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(fleet.FleetError, match="nested deeper"):
        fleet_celery.work_from({"body": {"point": deep}, "mac": "0"})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "12.5", None])
def test_a_non_finite_clock_reply_is_refused(value):
    member, coordinator = Pipe()

    def reply() -> None:
        coordinator.recv_bytes()
        fleet._send(coordinator, {"op": "time", "t2": value, "t3": 1.0})

    threading.Thread(target=reply, daemon=True).start()
    with pytest.raises(fleet.FleetError, match="t2 must be a finite number"):
        fleet._sync_clock(member, lambda: 1.0, "member 0")


def test_a_non_finite_ready_offset_fails_the_point(tmp_path):
    def launch(work, address):
        key = b"k" * 32

        def run() -> None:
            with fleet.connect(address, key) as conn:
                fleet._send(conn, {"op": "hello", "member": 0, "requests": 4, "dealt": 4})
                fleet._send(conn, {"op": "ready", "offset_s": float("nan"), "rtt_s": 0.001})
                conn.poll(5)

        return ThreadMember(run), key

    works = fleet.member_works(_works("http://127.0.0.1:9/", tmp_path, None)[0].ctx, key=2, repeat=0, members=1)
    with pytest.raises(fleet.FleetError, match="offset_s must be a finite number"):
        fleet.run_fleet(works, launch=launch)
