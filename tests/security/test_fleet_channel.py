"""A client fleet's channel (bench.fleet): only a member holding the point's key gets through, and
what a member sends is JSON checked against its deal, never unpickled or taken on trust."""

from __future__ import annotations

import pickle
import threading
import time

import pytest

from bakeoff.bench.cli import AdhocTarget
from bakeoff.bench.fleet import members as fleet
from bakeoff.bench.load.point import Ctx
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import Slo, Workload
from tests.fleet_fixtures import ThreadMember


def _works(tmp_path, members: int = 1):
    w = Workload(name="x", input_len=8, output_len=2, concurrency=[2], requests_per_point=4)
    ep = Endpoint(target="t", base_url="http://127.0.0.1:9/", model="m", stack="scripted", emulated=True)
    ctx = Ctx(ep, AdhocTarget("t"), w, Slo(), tmp_path, "r", None, True, provenance=False)
    return fleet.member_works(ctx, key=2, repeat=0, concurrency=2, members=members)


def _scripted(script):
    """A launcher whose member connects with its key and speaks ``script(conn)``."""

    def launch(work, address):
        key = b"k" * 31 + bytes([work.member])

        def run() -> None:
            with fleet.connect(address, key) as conn:
                script(conn)

        return ThreadMember(run), key

    return launch


def _send(conn, msg) -> None:
    fleet._send(conn, msg)


def _until_start(conn, requests: int = 6) -> None:
    _send(conn, {"op": "hello", "member": 0, "requests": requests, "dealt": requests})
    _send(conn, {"op": "ready", "offset_s": 0.0, "rtt_s": 0.0001})
    conn.recv_bytes()  # the start


def _row(index: int, **extra):
    return {
        "run_id": "r",
        "target": "t",
        "workload": "x",
        "concurrency": 2,
        "repeat": 0,
        "index": index,
        "warmup": False,
        "send_time": 0.0,
        "start_offset": 0.0,
        **extra,
    }


def test_a_connection_without_the_points_key_is_refused_before_any_message(tmp_path):
    def launch(work, address):
        def run() -> None:
            try:
                fleet.connect(address, b"a guessed key")
            except Exception:  # noqa: BLE001 - the impostor's side of the refusal
                pass

        return ThreadMember(run), b"the member's own key"

    with pytest.raises(fleet.FleetError, match="connection failed: AuthenticationError"):
        fleet.run_fleet(_works(tmp_path), launch=launch)


def test_a_pickle_from_a_member_is_never_unpickled(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (marker.write_text, ("x",))

    def script(conn) -> None:
        conn.send_bytes(pickle.dumps(Evil()))

    with pytest.raises(fleet.FleetError, match="not JSON"):
        fleet.run_fleet(_works(tmp_path), launch=_scripted(script))
    assert not marker.exists()


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        ([_row(1), _row(1)], "not in its deal or came twice"),
        ([_row(99)], "not in its deal"),
        ([_row(0, shell="rm -rf /")], r"record fields \['shell'\] are not RequestRecord's"),
        ([{"index": 0}], "a record without"),
    ],
)
def test_records_outside_the_members_deal_or_schema_fail_the_point(tmp_path, rows, error):
    def script(conn) -> None:
        _until_start(conn)
        _send(conn, {"op": "records", "rows": rows})
        _send(conn, {"op": "done", "figures": {}})

    with pytest.raises(fleet.FleetError, match=error):
        fleet.run_fleet(_works(tmp_path), launch=_scripted(script))


def test_an_oversized_message_is_refused_unread(tmp_path):
    def script(conn) -> None:
        try:
            conn.send_bytes(b" " * (fleet.MESSAGE_MAX_BYTES + 1))
        except ConnectionError:
            pass  # the coordinator hung up on it

    with pytest.raises(fleet.FleetError, match="bad message length"):
        fleet.run_fleet(_works(tmp_path), launch=_scripted(script))


def test_a_member_naming_itself_out_of_range_is_refused(tmp_path):
    def script(conn) -> None:
        _send(conn, {"op": "hello", "member": 7, "requests": 4, "dealt": 4})

    with pytest.raises(fleet.FleetError, match="named itself 7"):
        fleet.run_fleet(_works(tmp_path), launch=_scripted(script))


def test_the_coordinator_listens_on_loopback_unless_told_otherwise(tmp_path):
    seen = []

    def launch(work, address):
        seen.append(address[0])
        return ThreadMember(lambda: None), b"k"

    with pytest.raises(fleet.FleetError, match="never connected"):
        fleet.run_fleet(_works(tmp_path), launch=launch)
    assert seen == ["127.0.0.1"]


def test_a_member_that_goes_silent_fails_the_point_instead_of_hanging_it(tmp_path, monkeypatch):
    monkeypatch.setattr(fleet, "SILENT_S", 1.5)
    gone = threading.Event()

    def script(conn) -> None:  # a host that vanished: its connection stays open, nothing more comes
        _until_start(conn)
        _send(conn, {"op": "alive"})
        gone.wait(30)

    t = time.monotonic()
    with pytest.raises(fleet.FleetError, match="member 0: silent for 2 s"):
        fleet.run_fleet(_works(tmp_path), launch=_scripted(script))
    gone.set()
    assert time.monotonic() - t < 15
