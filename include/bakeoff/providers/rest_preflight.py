"""The pre-flight checks Vultr and DigitalOcean share over their REST APIs: the account, the regions,
whether a type is offered there, the SSH keys a create would name. Each cloud's own checks call these
(``vultr.preflight``, ``digitalocean.preflight``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.providers.preflight_checks import FAIL, OK, WARN, Check, CloudChecks


def account_first(checks: CloudChecks) -> CloudChecks:
    """A REST cloud's checks, run once its account answers: a refused token stops the rest."""

    def run(t: Any, i: int, p: Any) -> Iterator[Check]:
        cred = credentials(t, p)
        yield cred
        if cred.result != FAIL:
            yield from checks(t, i, p)

    return run


def credentials(t: Any, p: Any) -> Check:
    r = p.api.request("GET", "account")
    if r.status_code != 200:
        conn = PROVIDERS[t.provider].conn_id
        return Check(
            t.name, "credentials", FAIL, f"GET /account: {r.status_code}", f"fix the {conn} connection's token"
        )
    acct = r.json().get("account") or {}
    status = acct.get("status", "active")
    if status != "active":
        return Check(t.name, "credentials", FAIL, f"account status {status}: {acct.get('status_message', '')}")
    return Check(t.name, "credentials", OK, f"account {acct.get('email') or acct.get('name') or ''}".strip())


def listed(items: list[str] | None) -> str:
    return ", ".join(items or []) or "none"


def regions(t: Any, p: Any) -> list[str]:
    return list(t.provider_options.regions) or p.default_regions(t)


def offered(
    t: Any, i: int, regions: list[str], offer: dict[str, Any] | None, what: str, locations: list[str] | None
) -> Check:
    """Is the target's type offered in one of its regions: ``offer`` is the cloud's listing entry for
    it (None: not listed), ``locations`` where that entry says it is sold."""
    if offer is None:
        return Check(t.name, "offered", FAIL, f"no {what} {t.instance_type}", f"targets[{i}].instance_type")
    where = [r for r in regions if r in (locations or [])]
    if where:
        return Check(t.name, "offered", OK, f"{t.instance_type} in {', '.join(where)}")
    return Check(
        t.name,
        "offered",
        FAIL,
        f"{t.instance_type} not in {', '.join(regions)} (offered in {listed(locations)})",
        f"targets[{i}].provider_options.regions",
    )


def known_regions(t: Any, i: int, wanted: list[str], known: set[str]) -> Check:
    """Are the target's regions ones the cloud lists (and, on DigitalOcean, open to new nodes)?"""
    unknown = [r for r in wanted if r not in known]
    if not unknown:
        return Check(t.name, "region", OK, f"{', '.join(wanted)} listed")
    fix = f"targets[{i}].provider_options.regions: use {', '.join(sorted(known)) or 'a listed region'}"
    return Check(
        t.name, "region", FAIL if len(unknown) == len(wanted) else WARN, f"{', '.join(unknown)} not listed", fix
    )


def ssh_keys(t: Any, i: int, p: Any, path: str) -> Check:
    """Each SSH key id the create would name, read back from the account."""
    ids = list(t.provider_options.ssh_key_ids)
    if not ids:
        return Check(t.name, "ssh keys", OK, "none named (no SSH port opened)")
    missing = [k for k in ids if p.api.request("GET", f"{path}/{k}").status_code != 200]
    if missing:
        return Check(
            t.name,
            "ssh keys",
            FAIL,
            f"{', '.join(missing)} not on the account",
            f"targets[{i}].provider_options.ssh_key_ids",
        )
    return Check(t.name, "ssh keys", OK, f"{len(ids)} found")
