"""A client fleet whose members run on bakeoff's own Celery client workers (bench.fleet.members's members,
started through the installation's broker instead of as local processes).

Airflow's Celery workers run Airflow's workloads only, so the members run on workers of this app:
``celery -A bakeoff.bench.fleet.fleet_celery worker -Q bakeoff-clients``, on the broker the installation
already runs ($BAKEOFF_FLEET_BROKER; unset, members stay local processes). One task,
``bakeoff.fleet_member``, runs ``fleet.member_main`` for one member.

Nothing secret travels through the broker, whose readers are more than the benchmark's, and
everything a member acts on is authenticated, because its writers are more too. A message is JSON
(the only serializer this app accepts): a body holding the point (endpoint URL, workload, deal, a
random nonce made per point), which member, where to connect, the fault injection, the hosts the
DNS-rebinding guard checks (serving.egress) and when it expires, and an HMAC of that whole body
under the installation's fleet key. Every bakeoff process holds the installation secret, so both
ends derive what they need from it: the member checks the MAC and the expiry before it acts on
anything, and its channel key is derived from the digest of its own body (so each member of each
point has its own key, which the coordinator accepts once: a message altered, replayed or aimed at
another member's slot cannot authenticate, and a coordinator that does not hold the key cannot
answer the member's challenge); the serving key comes from the run and target (secrets.api_key, as
the plan's targets get theirs). A target whose key is its own (an existing endpoint's connection)
cannot have a Celery fleet.

The coordinator listens on $BAKEOFF_FLEET_BIND (default 127.0.0.1, a free port) and tells members
to connect to $BAKEOFF_FLEET_ADVERTISE (default: the bound address).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import hashlib
import hmac
import ipaddress
import json
import os
import re
import socket
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from celery import Celery, signals
from celery.result import AsyncResult
from celery.states import FAILURE, READY_STATES
from kombu.exceptions import OperationalError

from bakeoff import secrets, store
from bakeoff.bench.client.prompts import RequestSpec
from bakeoff.bench.client.sizing import PromptSizer
from bakeoff.bench.fleet.members import (
    BROKER_ENV,
    READY_TIMEOUT_S,
    FleetError,
    FleetPoint,
    MemberHandle,
    MemberWork,
    member_main,
    run_fleet,
)
from bakeoff.bench.load.point import AdhocTarget, Ctx
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan.workload import Workload
from bakeoff.serving import egress

BIND_ENV = "BAKEOFF_FLEET_BIND"
ADVERTISE_ENV = "BAKEOFF_FLEET_ADVERTISE"
QUEUE = "bakeoff-clients"
TASK = "bakeoff.fleet_member"
VERSION = 2
MAX_MESSAGE_DEPTH = 32  # a body nested deeper is refused before it is hashed or read
WORKER_COMMAND = f"celery -A bakeoff.bench.fleet.fleet_celery worker -Q {QUEUE}"
_HOST_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")


class FleetConfigError(ValueError):
    """A fleet setting in the environment that cannot work; the message names the variable and the fix."""


# --- settings ------------------------------------------------------------------------------------


def broker() -> str | None:
    """The broker URL client workers take members from, or None (members are local processes)."""
    raw = os.environ.get(BROKER_ENV, "").strip()
    if not raw:
        return None
    scheme = urlsplit(raw).scheme
    if scheme not in ("redis", "rediss"):  # the URL itself is never echoed: it may hold a password
        raise FleetConfigError(
            f"{BROKER_ENV}: scheme {scheme or '(none)'!r} is not a broker the client workers use; set it to the "
            "installation's Redis URL (redis://:PASSWORD@HOST:6379/2 or rediss://...), or unset it to run a "
            "fleet's members as local processes"
        )
    return raw


def bind_address() -> tuple[str, int]:
    """Where the coordinator listens: $BAKEOFF_FLEET_BIND as IP[:port] ([IPv6]:port), port 0 = free."""
    raw = os.environ.get(BIND_ENV, "").strip() or "127.0.0.1"
    m = re.fullmatch(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<v4>[0-9.]+))(?::(?P<port>[0-9]{1,5}))?", raw)
    try:
        if m is None:
            raise ValueError(raw)
        host = str(ipaddress.ip_address(m["v6"] or m["v4"]))
        port = int(m["port"] or 0)
        if port > 65535:
            raise ValueError(port)
    except ValueError:
        raise FleetConfigError(
            f"{BIND_ENV}={raw[:80]!r}: expected an IP address of this host, optionally with a port "
            "(10.0.0.5, 10.0.0.5:4711, [fd00::5]:4711); unset it to listen on 127.0.0.1 (client workers on this "
            "host only)"
        ) from None
    return host, port


def advertise_host(bound: str) -> str:
    """The host members connect to: $BAKEOFF_FLEET_ADVERTISE, else the bound address itself.
    ``@hostname`` is this host's own name (a container's on a compose network, where each scaled
    worker has its own and one setting serves them all)."""
    raw = os.environ.get(ADVERTISE_ENV, "").strip()
    if raw == "@hostname":
        raw = socket.gethostname()
    if not raw:
        if ipaddress.ip_address(bound).is_unspecified:
            raise FleetConfigError(
                f"{ADVERTISE_ENV}: the coordinator listens on every interface ({BIND_ENV}={bound}), so members "
                f"need to be told where to reach it; set {ADVERTISE_ENV} to this host's name or address as the "
                "client workers see it (@hostname: this host's own name)"
            )
        return bound
    try:
        return str(ipaddress.ip_address(raw.strip("[]")))
    except ValueError:
        pass
    if not _HOST_RE.fullmatch(raw):
        raise FleetConfigError(
            f"{ADVERTISE_ENV}={raw[:80]!r}: expected a host name or IP address without scheme or port "
            "(bench-1.internal, 10.0.0.5, or @hostname for this host's own name); the port is the one the "
            "coordinator bound"
        )
    return raw


# --- the message: the point as JSON, no key ------------------------------------------------------


def serving_auth(ctx: Ctx) -> str:
    """``derived`` when members can derive the serving key themselves, ``none`` when there is none."""
    if ctx.api_key is None:
        return "none"
    if ctx.api_key == secrets.api_key(ctx.run_id, ctx.target.slug):
        return "derived"
    name = ctx.target.name
    raise FleetError(
        f"targets.{name}: its serving key is its own (an existing endpoint's connection), which members on "
        f"client workers cannot derive and the broker must not carry; set workloads[].client_fleet to 1 for "
        f"{ctx.workload.name}, or unset {BROKER_ENV} to run the fleet's members as local processes"
    )


def point_doc(work: MemberWork) -> dict[str, Any]:
    """The part of the message every member of the point shares (the channel key is derived from it)."""
    ctx = work.ctx
    sizer = ctx.sizer
    return {
        "nonce": os.urandom(16).hex(),
        "run_id": ctx.run_id,
        "target": {"slug": ctx.target.slug, "gpus_used": int(ctx.target.gpus_used)},
        "endpoint": ctx.endpoint.to_dict(),
        "workload": ctx.workload.model_dump(mode="json"),
        "emulated": ctx.emulated,
        "prompt_seed": ctx.prompt_seed,
        "sizer": dataclasses.asdict(sizer) if sizer is not None else None,
        "auth": serving_auth(ctx),
        "key": work.key,
        "repeat": work.repeat,
        "members": work.members,
        "concurrency": work.concurrency,
        "offsets": work.offsets,
        "specs": [dataclasses.asdict(s) for s in work.specs] if work.specs is not None else None,
    }


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _mac(body: dict[str, Any]) -> str:
    return hmac.new(secrets.fleet_key("message"), _canonical(body), hashlib.sha256).hexdigest()


def channel_key(body: dict[str, Any]) -> bytes:
    """A member's channel key: derived from the installation secret and the digest of its whole
    message body (point and nonce, member, address, fault, guarded hosts), so no two members and
    no two points share one."""
    return secrets.fleet_key(f"channel/{hashlib.sha256(_canonical(body)).hexdigest()}")


def message(point: dict[str, Any], work: MemberWork, address: tuple[str, int]) -> dict[str, Any]:
    """One member's task argument: its body (the shared point, which member, where to connect, fault
    injection, the guarded hosts, the expiry) and the body's MAC."""
    body = {
        "v": VERSION,
        "point": point,
        "member": work.member,
        "address": [address[0], address[1]],
        "fault": {"clock_skew_s": work.clock_skew_s, "stall_ms": work.stall_ms},
        "guarded": egress.guarded_hosts(),
        "expires_at": time.time() + READY_TIMEOUT_S,
    }
    return {"body": body, "mac": _mac(body)}


def authentic_body(msg: object) -> dict[str, Any]:
    """The message's body once its MAC, version and expiry hold; a FleetError naming what does not,
    before anything of it is acted on."""
    if not isinstance(msg, dict) or not isinstance(msg.get("body"), dict) or not isinstance(msg.get("mac"), str):
        raise FleetError(
            "fleet member: a message without a signed body (client workers and Airflow workers run "
            "different bakeoff releases, or the broker holds a forged message; deploy the same release)"
        )
    body = msg["body"]
    if store.json_depth(body, MAX_MESSAGE_DEPTH) > MAX_MESSAGE_DEPTH:
        raise FleetError(f"fleet member: a message nested deeper than {MAX_MESSAGE_DEPTH}: refused unread")
    try:
        expected = _mac(body)
    except ValueError as e:  # NaN, infinity: never in a message this app writes
        raise FleetError(f"fleet member: a message with a value JSON cannot carry ({e})") from e
    if not hmac.compare_digest(expected, msg["mac"]):
        raise FleetError(
            "fleet member: the message's MAC does not match its body (altered in the broker, or signed "
            "with another installation's secret): refused before any connection or request"
        )
    if body.get("v") != VERSION:
        raise FleetError(
            f"fleet member: a message of another version than {VERSION} (client workers and Airflow "
            "workers run different bakeoff releases: deploy the same one)"
        )
    expires = body.get("expires_at")
    if not isinstance(expires, (int, float)) or time.time() > expires:
        raise FleetError("fleet member: the message has expired (a point's members start within its ready time)")
    return dict(body)


def work_from(msg: object) -> tuple[MemberWork, tuple[str, int], bytes, list[str]]:
    """The member's work, where to connect, its channel key and the guarded hosts, from a task's
    message once it is authentic; the serving key re-derived here, never received."""
    body = authentic_body(msg)
    try:
        return _work(body)
    except (KeyError, TypeError, ValueError) as e:  # signed by this installation, yet not this release's shape
        raise FleetError(f"fleet member: a message of another shape ({type(e).__name__}: {str(e)[:200]})") from e


def _work(body: dict[str, Any]) -> tuple[MemberWork, tuple[str, int], bytes, list[str]]:
    p = body["point"]
    # what a member needs of the target: its slug (in the records) and GPU count; a slug names itself
    target = AdhocTarget(str(p["target"]["slug"]), int(p["target"]["gpus_used"]))
    api_key = secrets.api_key(str(p["run_id"]), target.slug) if p["auth"] == "derived" else None
    ctx = Ctx(
        Endpoint.from_dict(p["endpoint"]),
        target,
        Workload.model_validate(p["workload"]),
        None,
        Path(tempfile.gettempdir()),  # a member writes nothing: its records go back over the channel
        str(p["run_id"]),
        api_key,
        bool(p["emulated"]),
        provenance=False,
        sizer=PromptSizer(**p["sizer"]) if p["sizer"] is not None else None,
        prompt_seed=p["prompt_seed"],
    )
    specs = [RequestSpec(**s) for s in p["specs"]] if p["specs"] is not None else None
    fault = body["fault"]
    work = MemberWork(
        ctx,
        int(p["key"]),
        int(p["repeat"]),
        int(body["member"]),
        int(p["members"]),
        p["concurrency"],
        p["offsets"],
        specs,
        float(fault["clock_skew_s"]),
        float(fault["stall_ms"]),
    )
    host, port = body["address"]
    guarded = [str(h) for h in body["guarded"]]
    return work, (str(host), int(port)), channel_key(body), guarded


# --- the Celery app ------------------------------------------------------------------------------


def make_app(broker_url: str | None) -> Any:
    """This app on ``broker_url``: JSON only, one member per worker slot and none reserved beyond the
    free slots, a member never redelivered (acknowledged when taken: a second run would be a replay),
    results (a member's worker name, or its error) in the broker's Redis."""
    app = Celery("bakeoff_fleet", set_as_current=False)
    app.conf.update(
        broker_url=broker_url or "memory://",
        result_backend=broker_url or "cache+memory://",
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        event_serializer="json",
        task_default_queue=QUEUE,
        task_acks_late=False,
        task_track_started=True,
        worker_prefetch_multiplier=1,
        worker_disable_prefetch=True,  # a member reserved behind another would wait for a point that waits for it
        result_expires=3600,
        broker_connection_retry_on_startup=True,
    )
    app.task(name=TASK, bind=True)(_fleet_member)
    return app


def _fleet_member(task: Any, msg: dict[str, Any]) -> dict[str, Any]:
    """The task: run one member; its result names the member and the worker, nothing else."""
    where = str(task.request.hostname or "")
    work, address, key, guarded = work_from(msg)
    with egress.guarding(guarded):  # the coordinator's rebinding guard, for this member's requests
        member_main(address, key, work, where=where)
    return {"member": work.member, "worker": where}


def _require_broker(**_: Any) -> None:
    if broker() is None:
        raise FleetConfigError(
            f"{BROKER_ENV} is not set: a client worker takes fleet members from the installation's broker; set it to "
            "the same Redis URL as the coordinators' (redis://:PASSWORD@HOST:6379/2) and start the worker again"
        )


signals.worker_init.connect(_require_broker, weak=False)
app = make_app(os.environ.get(BROKER_ENV, "").strip() or None)  # `celery -A bakeoff.bench.fleet.fleet_celery worker`


@functools.lru_cache(maxsize=4)
def _client_app(broker_url: str) -> Any:
    return make_app(broker_url)


class CeleryMember:
    """A member sent to a client worker, as a MemberHandle: alive until its task has ended."""

    def __init__(self, result: AsyncResult) -> None:
        self.result = result

    def is_alive(self) -> bool:
        return str(self.result.state) not in READY_STATES

    def join(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while self.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)

    def terminate(self) -> None:
        self.result.revoke(terminate=True)

    def release(self) -> None:
        """Stop listening for the task's result now, while the broker is up (not when collected)."""
        backend, self.result.backend = self.result.backend, None
        if backend is not None:
            with contextlib.suppress(Exception):
                backend.remove_pending_result(self.result)

    def failure(self) -> str:
        """Why the task failed, if it did (the coordinator's error names it)."""
        if str(self.result.state) != FAILURE:
            return ""
        return f"task {self.result.id} failed: {str(self.result.result)[:300]}"


def run_celery_fleet(works: list[MemberWork]) -> FleetPoint:
    """bench.fleet.members.run_fleet with each member a task on the client workers (blocking)."""
    url = broker()
    if url is None:
        raise FleetConfigError(f"{BROKER_ENV} is not set: a Celery fleet needs the installation's broker URL")
    client = _client_app(url)
    point = point_doc(works[0])
    bind = bind_address()
    advertise = advertise_host(bind[0])

    handles: list[CeleryMember] = []

    def launch(work: MemberWork, address: tuple[str, int]) -> tuple[MemberHandle, bytes]:
        # the member derives its channel key from the body again: the key is never sent
        msg = message(point, work, address)
        key = channel_key(msg["body"])  # before it leaves: what the broker hands on is not ours to trust
        result = client.send_task(TASK, args=[msg], queue=QUEUE, expires=READY_TIMEOUT_S)
        handles.append(CeleryMember(result))
        return handles[-1], key

    try:
        return run_fleet(works, launch=launch, address=bind, advertise=advertise)
    except FleetError as e:
        if "never connected" not in str(e):
            raise
        raise FleetError(
            f"{e}: each member needs a free slot on a client worker ({WORKER_COMMAND}; its --concurrency "
            f"slots, client_fleet in all) that reaches this address ({ADVERTISE_ENV}, {BIND_ENV})"
        ) from e
    except OperationalError as e:  # kombu's: the broker did not take the message
        raise FleetError(
            f"{BROKER_ENV}: the broker refused or did not answer ({type(e).__name__}); check the URL and that its "
            "Redis is up"
        ) from e
    except OSError as e:
        if e.errno not in (errno.EADDRNOTAVAIL, errno.EADDRINUSE):
            raise
        raise FleetConfigError(
            f"{BIND_ENV}: cannot listen on {bind[0]}:{bind[1]} ({e.strerror or e}); set it to an address of this "
            "host, with port 0 or none for a free port"
        ) from e
    finally:
        for h in handles:
            h.release()
