"""The pre-flight of a cloud on ``rest.py`` (Vultr, DigitalOcean): one sequence of checks over its REST
API, the account, the regions, whether the type is offered there, the quota, the image, the SSH keys a
create would name, with what differs per cloud (where each listing is, what its rows are keyed by, its
quota and image reads, what its create does untried) given by the cloud's ``RestPreflight``, its
registry ``preflight``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bakeoff.core.launch import LaunchSpec
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.providers.preflight_checks import FAIL, NA, OK, WARN, Check, untried
from bakeoff.providers.rest import RestProvider, rest_options

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.target import Target

Row = dict[str, Any]


def _every(row: Row) -> bool:
    return True


@dataclass(frozen=True)
class Listing:
    """One of the cloud's paged listings: its path, the answer's list field, each row's id field, the page
    size it allows, and which rows count (DigitalOcean's unavailable regions and sizes do not)."""

    path: str
    key: str
    id: str
    per_page: int
    counts: Callable[[Row], bool] = _every

    def read(self, p: RestProvider) -> dict[Any, Row]:
        return {x[self.id]: x for x in p.api.pages(self.path, self.key, {"per_page": self.per_page}) if self.counts(x)}


@dataclass(frozen=True)
class RestPreflight:
    """A REST cloud's pre-flight checks of one target on one offer (a ``CloudChecks``): reads only, the
    rest once its account answers (a refused token stops them)."""

    cloud: str  # as a person reads it in the rows ("Vultr")
    regions: Listing
    offers: Listing
    offer_word: str  # what the listing calls an offer, for "no <word> <type>"
    sold_in: str  # the offer's field that lists the regions it is sold in
    ssh_keys: str  # the path an SSH key id is read back under
    quota: Callable[[Target, RestProvider], Check]  # (target, provider) -> its quota row
    image: Callable[[Target, int, RestProvider], Iterator[Check]]  # (target, index, provider) -> its image rows
    untried: tuple[str, ...]  # what its create does that nothing here can try (also in docs/production.md)

    def __call__(self, t: Target, i: int, p: RestProvider, launch: LaunchSpec) -> Iterator[Check]:
        cred = credentials(t, p)
        yield cred
        if cred.result == FAIL:
            return
        wanted = list(t.provider_options.regions) or p.default_regions(t)
        yield known_regions(t, i, wanted, set(self.regions.read(p)))
        offer = self.offers.read(p).get(t.instance_type)
        yield offered(t, i, wanted, offer, self.offer_word, (offer or {}).get(self.sold_in))
        yield self.quota(t, p)
        yield from self.image(t, i, p)
        yield ssh_keys(t, i, p, self.ssh_keys)
        yield Check(t.name, "dry run", NA, f"{self.cloud} has no dry-run create")
        yield untried(t, list(self.untried))


def credentials(t: Target, p: RestProvider) -> Check:
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


def offered(
    t: Target, i: int, regions: list[str], offer: dict[str, Any] | None, what: str, locations: list[str] | None
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


def known_regions(t: Target, i: int, wanted: list[str], known: set[str]) -> Check:
    """Are the target's regions ones the cloud lists (and, on DigitalOcean, open to new nodes)?"""
    unknown = [r for r in wanted if r not in known]
    if not unknown:
        return Check(t.name, "region", OK, f"{', '.join(wanted)} listed")
    fix = f"targets[{i}].provider_options.regions: use {', '.join(sorted(known)) or 'a listed region'}"
    return Check(
        t.name, "region", FAIL if len(unknown) == len(wanted) else WARN, f"{', '.join(unknown)} not listed", fix
    )


def ssh_keys(t: Target, i: int, p: RestProvider, path: str) -> Check:
    """Each SSH key id the create would name, read back from the account."""
    ids = list(rest_options(t).ssh_key_ids)
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
