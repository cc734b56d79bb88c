"""One point's client spread over a fleet of members that share no clock and no memory.

``workers`` (bench.fleet.workers) splits a point over processes of one host: one monotonic clock, shared
memory for the barrier and the closed loop's queue. A rack that emits a million output tokens/s
needs more client cores than one host gives the benchmark task, so a fleet's members may run
anywhere a connection reaches (local processes here; bench.fleet.fleet_celery's Celery tasks on client
workers; a co-located client node would run ``member_main`` the same way). Each member talks to the
coordinator over one authenticated channel (multiprocessing.connection, then JSON messages only,
never pickle): each member has its own key, and both ends prove it before anything is read, each
direction under its own sub-key, so a member's proof cannot stand for another member or be
reflected back as the coordinator's (``connect``, ``_authenticate``). Then each member:

1. builds the point's requests (deterministic: the same specs in every member) and warms its
   connections;
2. measures its clock offset against the coordinator NTP-style: four timestamps per exchange
   (member send t1, coordinator receive t2 and reply t3, member receive t4), offset
   ((t2 - t1) + (t3 - t4)) / 2, round trip (t4 - t1) - (t3 - t2); the exchange with the shortest
   round trip of SYNC_SAMPLES is kept, its error is at most half that round trip;
3. starts at the one start time the coordinator deals (its own clock, offset applied) and sends its
   deal through the one measurement loop (point.measure);
4. says it is alive every HEARTBEAT_S while it measures (a member silent SILENT_S, its worker or
   host gone without closing the channel, fails the point rather than hanging it);
5. returns its records with send times on its own clock and its loop monitor's figures.

The coordinator corrects each member's send times by its offset, merges the records into one point
(the same RequestRecord schema; start offsets are from the one shared start) and marks the point
client-bound when any member was (monitor.merge_figures). The deal: open loop, the one arrival
schedule round-robin (request i to member i mod N), an open-loop ``max_concurrency`` split exactly.
Closed loop, one budget by a fixed split: member m holds c_m slots, the c_m summing to the point's
concurrency (C // N each, one more for the first C % N), and takes the requests of its slots
(request i belongs to the member holding slot i mod C), so the fleet never has more than C in
flight and every member runs out of work at about the same time. Unlike the workers' shared queue
there is no per-request round trip to the coordinator; the price is a tail where a member that
finished first leaves its slots idle (about one request's duration).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import math
import multiprocessing
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from typing import TYPE_CHECKING, Any, Protocol

from bakeoff.bench.client.monitor import merge_figures
from bakeoff.bench.client.runtime import run_async
from bakeoff.bench.load.loadgen import wait_until
from bakeoff.bench.load.point import Ctx, client_for, measure, point_sender
from bakeoff.bench.metrics.records import RequestRecord

if TYPE_CHECKING:
    from bakeoff.bench.client.clock import Offsets

log = logging.getLogger(__name__)

_now = time.perf_counter
SYNC_SAMPLES = 16  # clock exchanges per member; the one with the shortest round trip is kept
START_LEAD_S = 0.5  # from the last member ready to the start: the start message must reach every member
READY_TIMEOUT_S = 120.0  # a member starts, imports, builds its requests and warms its connections
HEARTBEAT_S = 2.0  # a measuring member says it is alive this often
SILENT_S = 30.0  # a member silent this long after the start is dead (its worker or host is gone)
MESSAGE_MAX_BYTES = 16 << 20  # one channel message; records travel in batches well below it
BATCH = 500  # records per message
AUTH_TIMEOUT_S = 10.0  # a connection that does not prove its key by then is refused
_CHALLENGE = 32  # bytes of a challenge and of a proof (HMAC-SHA256)
BROKER_ENV = "BAKEOFF_FLEET_BROKER"  # set: members are Celery tasks on client workers (bench.fleet.fleet_celery)
_RECORD_FIELDS = {f.name for f in fields(RequestRecord) if f.init}


class FleetError(RuntimeError):
    """A member failed, went silent or broke the protocol: the point cannot be merged."""


# --- the deal ------------------------------------------------------------------------------------


def shares(total: int, members: int) -> list[int]:
    """``total`` split exactly over ``members``: total // members each, one more for the first total % members."""
    return [total // members + (1 if m < total % members else 0) for m in range(members)]


def dealt(n_requests: int, members: int, member: int, concurrency: int | None) -> list[int]:
    """Request indices member ``member`` sends. Open loop (no concurrency): round-robin. Closed loop:
    the requests of its slots, request i to the member holding slot i mod C (slots numbered member
    by member), so each member's share of the requests is its share of the budget."""
    if not concurrency:
        return list(range(member, n_requests, members))
    owner = [m for m, c in enumerate(shares(concurrency, members)) for _ in range(c)]
    return [i for i in range(n_requests) if owner[i % concurrency] == member]


def fleet_size(requested: int, concurrency: int | None, budget: int | None, n_offsets: int | None) -> int:
    """Members that get work: no more than the slots of the budget, nor than the open-loop arrivals."""
    n = requested
    if budget:
        n = min(n, budget)
    if not concurrency and n_offsets is not None:
        n = min(n, n_offsets)
    return max(1, n)


# --- clocks --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClockSample:
    """One four-timestamp exchange: ``offset_s`` = coordinator clock - member clock."""

    offset_s: float
    rtt_s: float


def clock_sample(t1: float, t2: float, t3: float, t4: float) -> ClockSample:
    """NTP's offset and round trip from member send t1, coordinator receive t2 and reply t3 (its
    clock), member receive t4 (the member's clock)."""
    return ClockSample(((t2 - t1) + (t3 - t4)) / 2, (t4 - t1) - (t3 - t2))


def best_sample(samples: Sequence[ClockSample]) -> ClockSample:
    """The exchange with the shortest round trip: the least queueing, the tightest error bound (rtt / 2)."""
    if not samples:
        raise ValueError("best_sample: no clock exchanges")
    return min(samples, key=lambda s: s.rtt_s)


# --- the channel ---------------------------------------------------------------------------------


def _send(conn: Connection, msg: dict[str, Any]) -> None:
    conn.send_bytes(json.dumps(msg, separators=(",", ":")).encode())


def _recv(conn: Connection, timeout_s: float | None, who: str) -> dict[str, Any]:
    if timeout_s is not None and not conn.poll(timeout_s):
        raise FleetError(f"{who}: no message within {timeout_s:.0f} s")
    try:
        raw = conn.recv_bytes(MESSAGE_MAX_BYTES)
    except EOFError as e:
        raise FleetError(f"{who}: channel closed") from e
    except OSError as e:  # over MESSAGE_MAX_BYTES, or the connection broke
        raise FleetError(f"{who}: {type(e).__name__}: {e}") from e
    try:
        msg = json.loads(raw)
    except ValueError as e:  # never unpickled: the channel carries JSON only
        raise FleetError(f"{who}: a message that is not JSON") from e
    except RecursionError as e:  # nested deeper than the parser's stack: refused, not a crash
        raise FleetError(f"{who}: a message nested too deep") from e
    if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
        raise FleetError(f"{who}: a message without an op")
    if msg["op"] == "error":
        m = msg.get("member")
        raise FleetError(f"{f'member {m}' if isinstance(m, int) else who} failed: {str(msg.get('error'))[:500]}")
    return msg


def _expect(msg: dict[str, Any], op: str, who: str) -> dict[str, Any]:
    if msg["op"] != op:
        raise FleetError(f"{who}: expected {op!r}, got {str(msg['op'])[:40]!r}")
    return msg


def _seconds(msg: dict[str, Any], name: str, who: str) -> float:
    """A clock field of a message as a finite number: a NaN or infinite time would poison every
    corrected send time of the point."""
    value = msg.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FleetError(f"{who}: {name} must be a finite number of seconds, got {str(value)[:40]!r}")
    return float(value)


# --- authentication: a key per member, proved both ways, one sub-key per direction -----------------


def _proof(key: bytes, direction: bytes, challenge: bytes) -> bytes:
    return hmac.new(key, direction + b"\0" + challenge, hashlib.sha256).digest()


_UP, _DOWN = b"member->coordinator", b"coordinator->member"


def connect(address: tuple[str, int], key: bytes) -> Connection:
    """A member's channel to the coordinator: prove ``key`` to it, then have it prove the same key
    back (under the other direction's sub-key) before anything else is sent or read."""
    conn = Client(address)
    try:
        if not conn.poll(AUTH_TIMEOUT_S):
            raise AuthenticationError("the coordinator sent no challenge")
        challenge = conn.recv_bytes(_CHALLENGE)
        mine = os.urandom(_CHALLENGE)
        conn.send_bytes(_proof(key, _UP, challenge) + mine)
        if not conn.poll(AUTH_TIMEOUT_S):
            raise AuthenticationError("the coordinator did not prove the key")
        if not hmac.compare_digest(conn.recv_bytes(_CHALLENGE), _proof(key, _DOWN, mine)):
            raise AuthenticationError("the coordinator does not hold this member's key")
    except BaseException:
        conn.close()
        raise
    return conn


def _authenticate(conn: Connection, keys: dict[int, bytes]) -> int:
    """Which member of ``keys`` (those not yet connected) this connection proves to be; raises
    AuthenticationError before reading more than one proof (64 bytes) from anyone else."""
    challenge = os.urandom(_CHALLENGE)
    conn.send_bytes(challenge)
    if not conn.poll(AUTH_TIMEOUT_S):
        raise AuthenticationError("no answer to the challenge")
    try:
        answer = conn.recv_bytes(2 * _CHALLENGE)
    except OSError as e:
        raise AuthenticationError(f"a malformed answer ({e})") from e
    proof, theirs = answer[:_CHALLENGE], answer[_CHALLENGE:]
    for m, key in keys.items():
        if hmac.compare_digest(proof, _proof(key, _UP, challenge)):
            conn.send_bytes(_proof(key, _DOWN, theirs))
            return m
    raise AuthenticationError("no member's key (or its member is already connected)")


# --- a member ------------------------------------------------------------------------------------


@dataclass
class MemberWork:
    """What a member needs to send its share: the point's context (plan, endpoint, workload) and
    load; picklable, as a process or a Celery task receives it. ``clock_skew_s`` and ``stall_ms``
    are fault injection: a member whose clock runs that far ahead, one whose event loop blocks once
    that long just after the start (a member falling behind)."""

    ctx: Ctx
    key: int
    repeat: int
    member: int
    members: int
    concurrency: int | None = None
    offsets: list[float] | None = None
    specs: Any = None
    clock_skew_s: float = 0.0
    stall_ms: float = 0.0


def member_main(address: tuple[str, int], authkey: bytes, work: MemberWork, where: str | None = None) -> None:
    """A member's whole life: connect, send its share of the point, report, disconnect. The channel
    is authenticated both ways before anything is sent (``connect``). ``where``: the member's worker
    or host, in the coordinator's report."""
    conn = connect(address, authkey)
    try:
        try:
            run_async(_member(conn, work, where or socket.gethostname()))
        except Exception as e:
            _send(conn, {"op": "error", "member": work.member, "error": f"{type(e).__name__}: {e}"})
            raise
    finally:
        conn.close()


def _sync_clock(conn: Connection, clock: Callable[[], float], who: str) -> ClockSample:
    samples = []
    for _ in range(SYNC_SAMPLES):
        t1 = clock()
        _send(conn, {"op": "time"})
        reply = _expect(_recv(conn, READY_TIMEOUT_S, who), "time", who)
        t4 = clock()
        samples.append(clock_sample(t1, _seconds(reply, "t2", who), _seconds(reply, "t3", who), t4))
    return best_sample(samples)


async def _heartbeat(conn: Connection, measuring: asyncio.Task[Any]) -> None:
    """Tell the coordinator this member is alive while it measures; a channel that broke (the
    coordinator gave up on the point) stops the measurement rather than sending on for nobody."""
    try:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            _send(conn, {"op": "alive"})
    except OSError:
        measuring.cancel()


async def _member(conn: Connection, work: MemberWork, where: str) -> None:
    ctx, who = work.ctx, f"member {work.member}"
    skew = work.clock_skew_s

    def clock() -> float:  # this member's wall clock (a host's own, here with the injected skew)
        return time.time() + skew

    wl = ctx.workload
    concurrency = work.concurrency
    cap = shares(concurrency or wl.max_concurrency or 0, work.members)[work.member] or None
    client = client_for(ctx)
    sync: dict[str, Any] = {}
    heartbeat: list[asyncio.Task[None]] = []  # before the try: a sender that fails to build reaches the finally
    try:
        sender = point_sender(
            ctx,
            client,
            key=work.key,
            repeat=work.repeat,
            concurrency=concurrency,
            offsets=work.offsets,
            specs=work.specs,
        )
        mine = dealt(len(sender.specs), work.members, work.member, concurrency)
        hello = {"op": "hello", "member": work.member, "requests": len(sender.specs), "dealt": len(mine)}
        _send(conn, {**hello, "where": where[:200]})

        async def start_at() -> float:
            sample = await asyncio.to_thread(_sync_clock, conn, clock, who)
            _send(conn, {"op": "ready", "offset_s": sample.offset_s, "rtt_s": sample.rtt_s})
            start = _expect(await asyncio.to_thread(_recv, conn, None, who), "start", who)
            # the coordinator's start time on this member's clock, then on its monotonic clock
            t0 = _now() + (_seconds(start, "at", who) - sample.offset_s - clock())
            await wait_until(t0)
            sync.update(sample=sample, wall_t0=clock() - (_now() - t0))
            measuring = asyncio.current_task()
            if measuring is not None:
                heartbeat.append(asyncio.create_task(_heartbeat(conn, measuring)))
            if work.stall_ms > 0:
                asyncio.get_running_loop().call_later(0.02, time.sleep, work.stall_ms / 1e3)
            return t0

        recs, figures = await measure(
            sender,
            warm=max(1, cap or 64 // work.members),
            concurrency=max(1, cap or 1) if concurrency else None,
            offsets=work.offsets,
            order=mine,
            max_concurrency=cap,
            max_point_s=wl.max_point_s,
            start_at=start_at,
        )
    finally:
        for h in heartbeat:
            h.cancel()
        await client.close()
    for r in recs:  # send times on this member's wall clock, from its monotonic clock since the start
        r.send_time = sync["wall_t0"] + r.start_offset
    for i in range(0, len(recs), BATCH):
        rows = [{**r.to_row(), "output_pieces": r.output_pieces} for r in recs[i : i + BATCH]]
        _send(conn, {"op": "records", "rows": rows})
    _send(conn, {"op": "done", "figures": figures})


# --- the coordinator -----------------------------------------------------------------------------


class MemberHandle(Protocol):
    """A started member (a local process; a Celery AsyncResult behind an adapter)."""

    def is_alive(self) -> bool: ...

    def join(self, timeout: float | None = None) -> None: ...

    def terminate(self) -> None: ...


# start(work, address) -> (handle, key): how members are started (local processes, Celery tasks)
# and the key each will prove (one per member)
Launcher = Callable[[MemberWork, tuple[str, int]], tuple[MemberHandle, bytes]]


def _processes() -> multiprocessing.context.ForkServerContext:
    """Members fork from a server process that imported the benchmark once (about 3 s of imports a
    spawned member would pay at every point); it shares nothing else with this process (no threads,
    no sockets, no loop)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def local_process(work: MemberWork, address: tuple[str, int]) -> tuple[MemberHandle, bytes]:
    """A member in a fresh local process, forked from the fork server (nothing inherited but its
    arguments), with 32 random bytes as its key."""
    key = secrets.token_bytes(32)
    p = _processes().Process(
        target=member_main, args=(address, key, work), name=f"fleet-member-{work.member}", daemon=True
    )
    p.start()
    return p, key


@dataclass
class MemberReport:
    """What the coordinator learnt of one member."""

    member: int
    dealt: int
    offset_s: float
    rtt_s: float
    figures: dict[str, Any]
    records: int = 0
    where: str = ""  # the member's worker or host, as it named itself


@dataclass
class FleetPoint:
    records: list[RequestRecord]
    figures: dict[str, Any]
    members: list[MemberReport] = field(default_factory=list)
    start_time: float = 0.0  # the shared start, coordinator's wall clock (epoch s)


class _Coordinator:
    def __init__(self, conns: list[Connection], hello: dict[int, dict[str, Any]], handles: list[MemberHandle]):
        self.conns, self.hello, self.handles = conns, hello, handles
        self.ready: dict[int, dict[str, Any]] = {}

    def where(self, m: int) -> str:
        return str(self.hello[m].get("where") or "")[:200]

    def name(self, m: int) -> str:
        """How errors name member m: its index and where it runs."""
        return f"member {m} on {self.where(m)}" if self.where(m) else f"member {m}"

    def _serve_until_ready(self, m: int, errors: list[BaseException]) -> None:
        """Answer member m's clock exchanges until it is ready (one thread per member)."""
        conn, who = self.conns[m], self.name(m)
        try:
            while True:
                msg = _recv(conn, READY_TIMEOUT_S, who)
                t2 = time.time()
                if msg["op"] == "ready":
                    self.ready[m] = {k: _seconds(msg, k, who) for k in ("offset_s", "rtt_s")}
                    return
                _expect(msg, "time", who)
                _send(conn, {"op": "time", "t2": t2, "t3": time.time()})
        except BaseException as e:  # noqa: BLE001 - re-raised by the coordinator's thread
            errors.append(e)

    def prepare(self) -> None:
        errors: list[BaseException] = []
        threads = [
            threading.Thread(target=self._serve_until_ready, args=(m, errors), daemon=True)
            for m in range(len(self.conns))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        totals = {int(h["requests"]) for h in self.hello.values()}
        if len(totals) != 1:
            raise FleetError(f"members built different points: {sorted(totals)} requests")

    def collect(
        self, m: int, deal: set[int], offset_s: float, timeout_s: float | None
    ) -> tuple[list[RequestRecord], dict[str, Any]]:
        """Member m's records (send times moved onto the coordinator's clock) and figures. Without
        ``timeout_s`` a member may take as long as it lives and speaks: one that ends, or that goes
        SILENT_S without a heartbeat (its worker or host died without closing the channel), fails
        the point."""
        conn, who = self.conns[m], self.name(m)
        out: list[RequestRecord] = []
        seen: set[int] = set()
        while True:
            if timeout_s is None:
                heard = _now()
                while not conn.poll(1.0):
                    if not self.handles[m].is_alive():
                        raise FleetError(f"{who}: ended without reporting")
                    if _now() - heard > SILENT_S:
                        raise FleetError(f"{who}: silent for {SILENT_S:.0f} s: its worker or host is gone")
            msg = _recv(conn, timeout_s, who)
            if msg["op"] == "alive":
                continue
            if msg["op"] == "done":
                figures = msg.get("figures")
                if not isinstance(figures, dict):
                    raise FleetError(f"{who}: no figures")
                return out, figures
            for row in _expect(msg, "records", who).get("rows", []):
                rec = _record(row, who)
                if rec.index not in deal or rec.index in seen:
                    raise FleetError(f"{who}: record {rec.index} is not in its deal or came twice")
                seen.add(rec.index)
                rec.send_time += offset_s  # onto the coordinator's clock
                out.append(rec)


def _record(row: object, who: str) -> RequestRecord:
    if not isinstance(row, dict):
        raise FleetError(f"{who}: a record that is not an object")
    unknown = set(row) - _RECORD_FIELDS - {"output_pieces"}
    if unknown:
        raise FleetError(f"{who}: record fields {sorted(unknown)[:5]} are not RequestRecord's")
    pieces = row.pop("output_pieces", None)
    try:
        rec = RequestRecord(**row)
    except TypeError as e:
        raise FleetError(f"{who}: a record without {e}") from e
    rec.output_pieces = pieces
    return rec


def run_fleet(
    works: Sequence[MemberWork],
    *,
    launch: Launcher = local_process,
    address: tuple[str, int] = ("127.0.0.1", 0),
    advertise: str | None = None,
    result_timeout_s: float | None = None,
) -> FleetPoint:
    """Start every member, deal them one start time, merge what they measured into one point.

    Blocking (run it on a thread from async code). ``address``: where the coordinator listens
    (loopback for local processes; an interface the client workers reach for a fleet across
    hosts); ``advertise``: the host members are told to connect to (default: the bound one).
    ``launch`` starts a member and names the key it will prove (random for a local process; a
    Celery fleet derives it from the signed message, bench.fleet.fleet_celery). ``result_timeout_s``:
    how long after the start a member may take to report (default: as long as it lives and speaks)."""
    handles: list[MemberHandle] = []
    conns: list[Connection] = []
    with Listener(address) as listener:  # no authkey: each connection proves its member's key (_accept)
        try:
            addr = listener.address
            if not isinstance(addr, tuple):
                raise FleetError(f"coordinator: expected a TCP address, got {addr!r}")
            reach = (advertise or str(addr[0]), int(addr[1]))
            keys: dict[int, bytes] = {}
            for w in works:
                handle, keys[w.member] = launch(w, reach)
                handles.append(handle)
            accepted = _accept(listener, keys, handles, reach)
            conns = list(accepted.values())
            ordered, hello = _by_member(accepted, len(works))
            coord = _Coordinator(ordered, hello, handles)
            coord.prepare()
            total = int(next(iter(coord.hello.values()))["requests"])
            start = time.time() + START_LEAD_S
            for c in conns:
                _send(c, {"op": "start", "at": start})
            recs: list[RequestRecord] = []
            reports: list[MemberReport] = []
            for w in works:
                m = w.member
                off = coord.ready[m]["offset_s"]
                deal = set(dealt(total, w.members, m, w.concurrency))
                mine, figs = coord.collect(m, deal, off, result_timeout_s)
                rtt = coord.ready[m]["rtt_s"]
                reports.append(MemberReport(m, len(deal), off, rtt, figs, len(mine), coord.where(m)))
                recs.extend(mine)
        finally:
            for c in conns:
                c.close()
            for h in handles:  # a member ends once it has reported; one that does not is stopped
                h.join(2.0)
                if h.is_alive():
                    h.terminate()
    recs.sort(key=lambda r: r.index)
    return FleetPoint(recs, fleet_figures(reports, recs), reports, start)


def _accept(
    listener: Listener, keys: dict[int, bytes], handles: list[MemberHandle], reach: tuple[str, int]
) -> dict[int, Connection]:
    """One authenticated connection per member of ``keys``, each key accepted once; a member that
    dies first fails the point instead of hanging it, and the members already connected are hung up
    on, so they end now rather than at their timeout."""
    n = len(keys)
    out: dict[int, Connection] = {}
    errors: list[BaseException] = []

    def take() -> None:
        try:
            while len(out) < n:
                conn = listener.accept()
                try:
                    m = _authenticate(conn, {m: k for m, k in keys.items() if m not in out})
                except BaseException:
                    conn.close()
                    raise
                out[m] = conn
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    t = threading.Thread(target=take, daemon=True)
    t.start()
    deadline = _now() + READY_TIMEOUT_S
    try:
        while t.is_alive():
            t.join(0.2)
            if errors:
                break
            if t.is_alive() and (_now() > deadline or any(not h.is_alive() for h in handles)):
                # a Celery member's adapter says why it ended; a local multiprocessing.Process cannot
                why = "; ".join(str(getattr(h, "failure", lambda: "")()) for h in handles if not h.is_alive())
                raise FleetError(
                    f"coordinator: {n - len(out)} member(s) never connected to {reach[0]}:{reach[1]}"
                    + (f" ({why[:500]})" if why.strip("; ") else "")
                )
        if errors:
            raise FleetError(f"coordinator: a member's connection failed: {type(errors[0]).__name__}")
    except FleetError:
        for c in list(out.values()):
            c.close()
        raise
    return out


def _by_member(conns: dict[int, Connection], n: int) -> tuple[list[Connection], dict[int, dict[str, Any]]]:
    """Connections in member order with each member's hello, which must name the member its key proved."""
    hello: dict[int, dict[str, Any]] = {}
    for m, c in conns.items():
        msg = _expect(_recv(c, READY_TIMEOUT_S, f"member {m}"), "hello", f"member {m}")
        if msg.get("member") != m:
            raise FleetError(f"a member named itself {msg.get('member')!r}: its key is member {m}'s")
        hello[m] = msg
    return [conns[m] for m in range(n)], hello


def fleet_figures(reports: Sequence[MemberReport], recs: Sequence[RequestRecord]) -> dict[str, Any]:
    """The point's client figures from its members': client-bound when any member was, send lag over
    the merged point, the fleet's size and the largest clock offset and round trip measured."""
    figs = merge_figures([r.figures for r in reports], [x.send_lag for x in recs])
    figs.update(
        client_fleet=len(reports),
        client_hosts=sorted({r.where for r in reports if r.where}),
        clock_offset_ms_max=max(abs(r.offset_s) for r in reports) * 1e3,
        clock_rtt_ms_max=max(r.rtt_s for r in reports) * 1e3,
    )
    return figs


def member_works(
    ctx: Ctx,
    *,
    key: int,
    repeat: int,
    concurrency: int | None = None,
    offsets: Offsets | None = None,
    specs: Any = None,
    members: int | None = None,
) -> list[MemberWork]:
    """One MemberWork per member of the workload's fleet (``client_fleet``, or ``members``)."""
    wl = ctx.workload
    n = fleet_size(
        members or int(wl.client_fleet),
        concurrency,
        concurrency or wl.max_concurrency,
        len(offsets) if offsets is not None else None,
    )
    offs = [float(o) for o in offsets] if offsets is not None else None
    return [MemberWork(ctx, key, repeat, m, n, concurrency, offs, specs) for m in range(n)]


async def measure_in_fleet(
    ctx: Ctx,
    *,
    key: int,
    repeat: int,
    concurrency: int | None = None,
    offsets: Offsets | None = None,
    specs: Any = None,
    run: Callable[[list[MemberWork]], FleetPoint] = run_fleet,
) -> tuple[list[RequestRecord], dict[str, Any]]:
    """One point over the workload's fleet (bench.run's entry): ``run`` starts the members (local
    processes by default, bench.fleet.fleet_celery.run_celery_fleet for client workers) and merges them."""
    works = member_works(ctx, key=key, repeat=repeat, concurrency=concurrency, offsets=offsets, specs=specs)
    point = await asyncio.to_thread(run, works)
    for r in point.members:
        log.info(
            "fleet member %d on %s: %d records, clock offset %+.3f ms (round trip %.3f ms)%s",
            r.member,
            r.where,
            r.records,
            r.offset_s * 1e3,
            r.rtt_s * 1e3,
            " client-bound" if r.figures.get("client_bound") else "",
        )
    return point.records, point.figures
