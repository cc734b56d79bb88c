"""The third teardown layer: terminate bakeoff-tagged nodes whose run has ended or whose expiry passed.

Runs hourly (the ``bakeoff_reaper`` DAG) across every configured provider, independent of any run,
so it catches what the teardown task and the run's all_done sweep could not: a worker killed with
SIGKILL, a scheduler that died, a run whose results store says it finished while a node still bills.

A node is reaped when
- its ``bakeoff:expires_at`` tag has passed (the run's max_instance_hours), or
- the results store's run.json for its run says the run ended (status other than running).
A node of a run this installation does not know is left alone until it expires: it may belong to
another installation sharing the account.

After its nodes, a provider's ``cleanup`` (where it has one) removes what they leave behind: EC2
per-run security groups, DigitalOcean cloud firewalls with no droplet left behind them.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

from bakeoff import store
from bakeoff.providers import get_provider
from bakeoff.providers.base import TAG_EXPIRES, TAG_PLAN, TAG_RUN, Instance

log = logging.getLogger(__name__)
CLOUD_PROVIDERS = ("aws", "vultr", "digitalocean", "oci", "local")


def run_status(tags: dict[str, str]) -> str | None:
    """The run's status from the results store (None when this installation has no record of it)."""
    plan, run_id = tags.get(TAG_PLAN), tags.get(TAG_RUN)
    if not plan or not run_id:
        return None
    doc = store.read_json(store.run_dir(plan, run_id) / "run.json")
    return (doc or {}).get("status")


def verdict_for_tags(tags: dict[str, str], now: float) -> str | None:
    """Why a tagged resource should go (expired, or its run ended), or None to keep it."""
    expires = tags.get(TAG_EXPIRES, "")
    if expires.isdigit() and now >= float(expires):
        return f"expired at {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime(float(expires)))}"
    status = run_status(tags)
    if status not in (None, "running"):
        return f"run {tags.get(TAG_RUN)} ended ({status})"
    return None


def verdict(inst: Instance, now: float) -> str | None:
    """Why this node should go, or None to keep it."""
    tags = {**inst.tags, TAG_RUN: inst.run_id}
    if inst.expires_at is not None:
        tags[TAG_EXPIRES] = str(int(inst.expires_at))
    return verdict_for_tags(tags, now)


def reap(now: float | None = None, provider_names: list[str] | tuple[str, ...] | None = None,
         credentials_fn: Callable[[str], dict[str, Any]] | None = None) -> dict[str, Any]:
    """One pass over every provider; returns what was terminated, kept, and which providers failed.

    Credentials come from ``credentials_fn(name)`` (the DAG passes its Airflow-connection resolver;
    default: the environment).
    """
    from bakeoff.providers.credentials import credentials_from_env  # noqa: PLC0415
    now = time.time() if now is None else now
    names = provider_names or CLOUD_PROVIDERS
    creds = credentials_fn or credentials_from_env
    out: dict[str, Any] = {"at": now, "terminated": [], "kept": [], "errors": {}}
    for name in names:
        try:
            provider = get_provider(name, credentials=creds(name))
            nodes = provider.list_tagged(None)
        except Exception as e:  # noqa: BLE001 - one unreachable cloud must not stop the others being reaped
            out["errors"][name] = f"{type(e).__name__}: {e}"
            log.error("reaper: cannot list %s: %s", name, out["errors"][name])
            continue
        for inst in nodes:
            why = verdict(inst, now)
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
                log.warning("reaper: terminated %s node %s (run %s, target %s): %s", name, inst.id, inst.run_id, inst.target, why)
        cleanup = getattr(provider, "cleanup", None)      # EC2 per-run security groups, DigitalOcean firewalls
        if cleanup:
            try:
                out.setdefault("cleaned", []).extend(cleanup(lambda tags: verdict_for_tags(tags, now) is not None))
            except Exception as e:  # noqa: BLE001 - a leftover firewall must not stop the next cloud being reaped
                out["errors"][f"{name}:cleanup"] = f"{type(e).__name__}: {e}"
                log.error("reaper: cannot clean up %s: %s", name, out["errors"][f"{name}:cleanup"])
    log.info("reaper: %d terminated, %d kept, %d errors", len(out["terminated"]), len(out["kept"]), len(out["errors"]))
    return out


def add_parser(sub) -> None:
    """`python -m bakeoff reap`: one reaper pass from the command line (credentials from the environment)."""
    p = sub.add_parser("reap", help="terminate expired or orphaned bakeoff instances")
    p.add_argument("--providers", nargs="*", default=list(CLOUD_PROVIDERS), help="providers to scan")
    p.set_defaults(func=lambda args: _print_reap(reap(provider_names=args.providers)))


def _print_reap(out: dict[str, Any]) -> int:
    for row in out["terminated"]:
        print(f"terminated {row['provider']} {row['id']} (run {row['run_id']}, target {row['target']}): {row['reason']}")
    for where, err in out["errors"].items():
        print(f"error {where}: {err}")
    print(f"{len(out['terminated'])} terminated, {len(out['kept'])} kept, {len(out['errors'])} errors")
    return 1 if out["errors"] else 0
