"""The third teardown layer: terminate bakeoff-tagged nodes whose run has ended or whose expiry passed.

Runs hourly (the ``bakeoff_reaper`` DAG) across every configured provider, independent of any run,
so it catches what the teardown task and the run's all_done sweep could not: a worker killed with
SIGKILL, a scheduler that died, a DAG run that ended while a node still bills.

A node is reaped when
- its ``bakeoff:expires_at`` tag has passed (the run's max_instance_hours), or
- Airflow says its run ended: ``run_state(plan, run_id)`` gives the DAG run's state (the reaper DAG
  asks through the Task SDK, ``python -m bakeoff reap`` through the REST API when
  $BAKEOFF_AIRFLOW_API_URL is set, see airflow_api.py; without either, expiry alone decides).
A node of a run Airflow does not know (None) is left alone until it expires: it may belong to
another installation sharing the account, or to a run started without Airflow. The run-state verdict
applies only to this installation's own nodes (their ``bakeoff:installation`` tag is
``secrets.installation_id()``): run ids repeat across installations (``scheduled__<date>``), so a node
another installation launched (or one with no such tag) goes only by its expiry or power state.

After its nodes, a provider's ``cleanup`` (where it has one) removes what they leave behind: EC2
per-run security groups, DigitalOcean cloud firewalls with no droplet left behind them.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bakeoff import airflow_api, secrets
from bakeoff.core.instance import Instance
from bakeoff.core.provider_facts import LAUNCHING, provider_info
from bakeoff.providers import get_provider
from bakeoff.providers.base import TAG_EXPIRES, TAG_INSTALLATION, TAG_PLAN, TAG_RUN, list_best_effort
from bakeoff.providers.credentials import configured, credentials_from_env

if TYPE_CHECKING:
    import argparse

log = logging.getLogger(__name__)
CLOUD_PROVIDERS = LAUNCHING  # every provider whose create starts a node


# (plan, run_id) -> the DAG run's state ("queued", "running", "success", "failed"), None when unknown
RunState = Callable[[str, str], "str | None"]
ACTIVE = ("queued", "running")


def no_run_state(plan: str, run_id: str) -> str | None:
    """Nothing to ask: every run is unknown, so only expiry tags decide."""
    return None


def cached(run_state: RunState) -> RunState:
    """Ask once per run in a pass (a run has several nodes and firewalls); a failed question is an
    unknown run, so its nodes stay until they expire."""
    seen: dict[tuple[str, str], str | None] = {}

    def ask(plan: str, run_id: str) -> str | None:
        if (plan, run_id) not in seen:
            try:
                seen[plan, run_id] = run_state(plan, run_id)
            except Exception as e:  # noqa: BLE001 - an unreachable Airflow must keep nodes, not fail the pass
                log.warning(
                    "reaper: no state for run %s of %s (%s: %s); kept until it expires",
                    run_id,
                    plan,
                    type(e).__name__,
                    e,
                )
                seen[plan, run_id] = None
        return seen[plan, run_id]

    return ask


def verdict_for_tags(
    tags: dict[str, str], now: float, run_state: RunState = no_run_state, installation: str | None = None
) -> str | None:
    """Why a tagged resource should go (expired, or its run ended), or None to keep it. Its run's state
    counts only when it carries ``installation``, this installation's id (None: no run verdicts)."""
    expires = tags.get(TAG_EXPIRES, "")
    if expires.isdigit() and now >= float(expires):
        return f"expired at {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime(float(expires)))}"
    plan, run_id = tags.get(TAG_PLAN), tags.get(TAG_RUN)
    ours = installation is not None and tags.get(TAG_INSTALLATION) == installation
    state = run_state(plan, run_id) if ours and plan and run_id else None
    if state is not None and state not in ACTIVE:
        return f"run {run_id} ended ({state})"
    return None


def verdict(
    inst: Instance, now: float, run_state: RunState = no_run_state, installation: str | None = None
) -> str | None:
    """Why this node should go, or None to keep it. A powered-off node goes too: its kill switch
    fired (or it died), and Vultr, DigitalOcean and OCI bill a stopped node until it is deleted."""
    if inst.state == "failed":
        return f"powered off ({inst.cloud_state or 'stopped'}): kill switch fired or the node failed"
    tags = {**inst.tags, TAG_RUN: inst.run_id}
    if inst.expires_at is not None:
        tags[TAG_EXPIRES] = str(int(inst.expires_at))
    return verdict_for_tags(tags, now, run_state, installation)


def reap(
    now: float | None = None,
    provider_names: list[str] | tuple[str, ...] | None = None,
    credentials_fn: Callable[[str], dict[str, Any]] | None = None,
    run_state: RunState = no_run_state,
) -> dict[str, Any]:
    """One pass over every provider; returns what was terminated, kept, and which providers failed.

    Every cloud is tried, and within a cloud every region it could list; ``errors`` names each place
    that could not be scanned and each node that could not be terminated (the DAG task then fails).

    Credentials come from ``credentials_fn(name)`` (the DAG passes its Airflow-connection resolver;
    default: the environment); whether a node's run is over, from ``run_state`` (see the module).
    """

    now = time.time() if now is None else now
    names = CLOUD_PROVIDERS if provider_names is None else provider_names
    creds = credentials_fn or credentials_from_env
    run_state = cached(run_state)
    own = secrets.known_installation_id()
    out: dict[str, Any] = {"at": now, "terminated": [], "kept": [], "errors": {}}
    for name in names:
        try:
            provider = get_provider(name, credentials=creds(name))
        except Exception as e:  # noqa: BLE001 - one unreachable cloud must not stop the others being reaped
            out["errors"][name] = f"{type(e).__name__}: {e}"
            log.error("reaper: cannot scan %s: %s", name, out["errors"][name])
            continue
        nodes, unlisted = list_best_effort(provider, None)  # a region that failed must not hide the rest
        for where, problem in unlisted.items():
            key = where if where == name else f"{name}:{where}"
            out["errors"][key] = problem
            log.error("reaper: cannot list %s: %s", key, problem)
        for inst in nodes:
            why = verdict(inst, now, run_state, own)
            row = {"provider": name, "id": inst.id, "run_id": inst.run_id, "target": inst.target}
            if why is None:
                out["kept"].append(row)
                continue
            try:
                done = provider.terminate(inst.id)
            except Exception as e:  # noqa: BLE001
                out["errors"][f"{name}:{inst.id}"] = f"{type(e).__name__}: {e}"
                continue
            if done:
                out["terminated"].append({**row, "reason": why})
                log.warning(
                    "reaper: terminated %s node %s (run %s, target %s): %s",
                    name,
                    inst.id,
                    inst.run_id,
                    inst.target,
                    why,
                )
        # only clouds whose registry entry declares ``cleanup`` have it: EC2 security groups, DigitalOcean firewalls
        cleanup = getattr(provider, "cleanup", None)
        if cleanup:
            try:
                out.setdefault("cleaned", []).extend(
                    cleanup(lambda tags: verdict_for_tags(tags, now, run_state, own) is not None)
                )
            except Exception as e:  # noqa: BLE001 - a leftover firewall must not stop the next cloud being reaped
                out["errors"][f"{name}:cleanup"] = f"{type(e).__name__}: {e}"
                log.error("reaper: cannot clean up %s: %s", name, out["errors"][f"{name}:cleanup"])
    log.info("reaper: %d terminated, %d kept, %d errors", len(out["terminated"]), len(out["kept"]), len(out["errors"]))
    return out


def with_credentials(
    provider_names: list[str] | tuple[str, ...], credentials_fn: Callable[[str], dict[str, Any]]
) -> list[str]:
    """The providers whose credentials are configured (every one that needs none), with one INFO line
    naming those skipped: a cloud this installation has no account on is not an error on every pass."""
    keep: list[str] = []
    skipped: list[str] = []
    for name in provider_names:
        try:
            ok = configured(provider_info(name).credentials, credentials_fn(name))
        except Exception:  # noqa: BLE001 - a resolver that fails is the pass's error to report, not a skip
            ok = True
        (keep if ok else skipped).append(name)
    if skipped:
        log.info("reaper: skipping %s: no credentials configured", ", ".join(skipped))
    return keep


def reap_loop(
    interval_s: float,
    provider_names: list[str] | tuple[str, ...] | None = None,
    credentials_fn: Callable[[str], dict[str, Any]] | None = None,
    *,
    run_state: RunState = no_run_state,
    wait: Callable[[float], bool] | None = None,
    now_fn: Callable[[], float] = time.time,
    max_passes: int | None = None,
) -> int:
    """The reaper without Airflow: one pass, then one every ``interval_s``, until ``wait`` says stop.

    Clouds with no credentials configured are skipped, named once at start (``with_credentials``), so
    an ERROR line means a configured cloud could not be listed. A failed pass is logged and the next
    one runs on time (a cloud that is down now may answer later). ``wait(seconds)`` returns True
    to stop (default: SIGTERM/SIGINT, checked while waiting); returns the number of passes run.
    """
    if not 0 < interval_s < float("inf"):  # also refuses NaN
        raise ValueError("--interval-s: expected a number of seconds > 0, e.g. --interval-s 300")

    credentials_fn = credentials_fn or credentials_from_env
    provider_names = with_credentials(provider_names or CLOUD_PROVIDERS, credentials_fn)
    stop = None
    if wait is None:
        stop = _stop_on_signals()
        wait = stop.wait
    passes = 0
    while max_passes is None or passes < max_passes:
        started = now_fn()
        passes += 1
        try:
            out = reap(now=started, provider_names=provider_names, credentials_fn=credentials_fn, run_state=run_state)
            log.info(
                "reaper loop: pass %d: %d terminated, %d kept, %d errors%s",
                passes,
                len(out["terminated"]),
                len(out["kept"]),
                len(out["errors"]),
                f" ({', '.join(out['errors'])})" if out["errors"] else "",
            )
        except Exception as e:  # noqa: BLE001 - the loop outlives any one pass: it is what runs when nothing else does
            log.error("reaper loop: pass %d failed: %s: %s", passes, type(e).__name__, e)
        if max_passes is not None and passes >= max_passes:
            break
        if wait(max(0.0, interval_s - (now_fn() - started))):
            log.info("reaper loop: stopping after %d passes", passes)
            break
    return passes


def _stop_on_signals() -> threading.Event:
    """An Event set by SIGTERM or SIGINT, so a service manager's stop ends the loop between passes."""

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`python -m bakeoff reap`: one reaper pass from the command line (credentials from the environment);
    ``--loop`` keeps passing every ``--interval-s`` as a service that does not need Airflow."""
    p = sub.add_parser("reap", help="terminate expired or orphaned bakeoff instances")
    p.add_argument("--providers", nargs="*", default=list(CLOUD_PROVIDERS), help="providers to scan")
    p.add_argument("--loop", action="store_true", help="keep running: one pass every --interval-s, until SIGTERM")
    p.add_argument(
        "--interval-s",
        type=float,
        default=300.0,
        help="seconds between passes with --loop (default 300); the longest a powered-off node bills on",
    )
    p.set_defaults(func=_run_reap)


def _run_reap(args: argparse.Namespace) -> int:
    run_state = airflow_api.run_state_from_env() or no_run_state
    if args.loop:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        try:
            reap_loop(args.interval_s, provider_names=args.providers, run_state=run_state)
        except ValueError as e:
            print(e)
            return 2
        return 0
    return _print_reap(reap(provider_names=args.providers, run_state=run_state))


def _print_reap(out: dict[str, Any]) -> int:
    for row in out["terminated"]:
        print(
            f"terminated {row['provider']} {row['id']} (run {row['run_id']}, target {row['target']}): {row['reason']}"
        )
    for where, err in out["errors"].items():
        print(f"error {where}: {err}")
    print(f"{len(out['terminated'])} terminated, {len(out['kept'])} kept, {len(out['errors'])} errors")
    return 1 if out["errors"] else 0
