"""What the REST clouds (Vultr, DigitalOcean) share: a retrying httpx client, pagination, tag codec.

Retries (tenacity): 429, 5xx and connection errors are retried with jittered exponential backoff,
honouring Retry-After, because both APIs rate-limit bursts. A 429 that says when its window resets
(DigitalOcean's ``ratelimit-remaining: 0`` with ``ratelimit-reset``, an epoch second) is waited out
to that moment, and 429s are retried for as long as ``rate_limit_wait_s`` allows rather than a number
of tries, so a teardown in a busy hour waits for the API instead of leaving a node billing.

A create is never blindly re-sent: after a lost or failed answer the caller first looks for what the
request may have made (by tag or name), so a retry never starts a second node.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception_type, retry_if_result, stop_after_attempt

from bakeoff.core.instance import Instance
from bakeoff.core.launch import LaunchSpec
from bakeoff.core.provider_facts import provider_info
from bakeoff.providers import tags as node_tags
from bakeoff.providers.base import (
    CloudProvider,
    PartialListing,
    Placement,
    ProviderError,
    RefusalReason,
    Refused,
    reachable,
)
from bakeoff.providers.listing import listed_instance

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.options import RestOptions
    from bakeoff.plan.target import Target

log = logging.getLogger(__name__)

RETRY_STATUS = {429, 500, 502, 503, 504}
MAX_DELAY_S = 30.0
# how long 429s are retried (DigitalOcean's per-minute window clears within 60 s; an hourly one may not)
RATE_LIMIT_WAIT_S = 600.0
T = TypeVar("T")


class RestClient:
    """httpx with Bearer auth, retries on 429/5xx and transport errors, and readable failures."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        cloud: str,
        retries: int = 5,
        backoff_s: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 30.0,
        rate_limit_wait_s: float = RATE_LIMIT_WAIT_S,
    ):
        if not token:
            info = provider_info(cloud)
            raise ProviderError(
                f"{cloud}: no API token; add it as the password of the {info.conn_id} Airflow "
                f"connection (or, without Airflow, set {info.env.get('token', 'the API token variable')})"
            )
        self.cloud, self.retries, self.backoff_s = cloud, retries, backoff_s
        self.rate_limit_wait_s = rate_limit_wait_s
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/",
            timeout=timeout_s,
            transport=transport,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        )

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, *, retry: bool = True, **kw: Any) -> httpx.Response:
        """One API call, retried on 429/5xx and connection errors; the last answer once retries run out
        (the caller says what its status means). ``retry=False`` sends it once: a create, which the
        caller reconciles by tag (``create``). A connection that never answers is a ProviderError."""

        def send() -> httpx.Response:
            try:
                return self._http.request(method, path.lstrip("/"), **kw)
            except httpx.TransportError as e:
                raise ProviderError(f"{self.cloud}: {method} {path} failed: {type(e).__name__}") from None

        retrying = Retrying(
            stop=self.stop if retry else stop_after_attempt(1),
            wait=self.wait,
            retry=retry_if_exception_type(ProviderError) | retry_if_result(_retryable),
            before_sleep=lambda state: log.info("%s: %s %s %s; retrying", self.cloud, method, path, _what(state)),
            retry_error_callback=_last_answer,
        )
        return retrying(send)

    def create(
        self, path: str, body: dict[str, Any], *, find: Callable[[], T | None], what: str = ""
    ) -> T | httpx.Response:
        """POST a create that is never re-sent blindly: after a 429/5xx or a lost answer, ``find`` looks
        for what the request may have made, and returns it; only when it finds nothing is the POST sent
        again. Returns the first answer not worth retrying (the caller judges its status); raises
        ProviderError naming the call once every try failed."""

        def attempt() -> T | httpx.Response:
            r = self._post_once(path, body)
            if r is not None and r.status_code not in RETRY_STATUS:
                return r
            found = find()
            if found is not None:
                return found
            raise _Unanswered(r)

        try:
            return Retrying(
                stop=self.stop,
                wait=self.wait,
                retry=retry_if_exception_type(_Unanswered),
                before_sleep=lambda state: log.info("%s: POST %s %s; retrying", self.cloud, path, _what(state)),
                reraise=True,
            )(attempt)
        except _Unanswered as e:
            raise ProviderError(
                f"{self.cloud}: {what or 'POST ' + path} kept failing ({e.status}) after {self.retries + 1} "
                "tries and created nothing; try again later"
            ) from None

    def _post_once(self, path: str, body: dict[str, Any]) -> httpx.Response | None:
        """One POST; None when its answer was lost (the connection failed)."""
        try:
            return self.request("POST", path, retry=False, json=body)
        except ProviderError:
            return None

    def stop(self, state: RetryCallState) -> bool:
        """Stop after ``retries`` retries, except on a 429: that is retried until ``rate_limit_wait_s``
        has passed since the first try (a rate limit ends; giving up early leaves the work undone)."""
        r = _answer(state)
        if r is not None and r.status_code == 429:
            return state.seconds_since_start is not None and state.seconds_since_start >= self.rate_limit_wait_s
        return state.attempt_number >= self.retries + 1

    def wait(self, state: RetryCallState) -> float:
        """Seconds before the next try: until the rate-limit window resets when the answer says so, else
        the server's Retry-After, else exponential backoff from ``backoff_s``; capped (a reset by what
        is left of ``rate_limit_wait_s``), with jitter so parallel tasks do not retry in step."""
        delay = self.backoff_s * 2.0 ** (state.attempt_number - 1)
        r = _answer(state)
        reset = rate_limit_reset(r) if r is not None else None
        if reset is not None:
            left = self.rate_limit_wait_s - (state.seconds_since_start or 0.0)
            return max(0.0, min(reset - time.time(), left)) + self.backoff_s * random.random()  # never early
        retry_after = r.headers.get("Retry-After") if r is not None else None
        if retry_after:
            try:
                delay = float(retry_after)
            except ValueError:
                pass  # an HTTP date: the exponential backoff stands
        return min(delay, MAX_DELAY_S) * (0.8 + 0.4 * random.random())

    def json(self, method: str, path: str, *, ok: tuple[int, ...] = (200, 201, 202, 204), **kw: Any) -> Any:
        r = self.request(method, path, **kw)
        if r.status_code not in ok:
            raise api_error(self.cloud, method, path, r)
        return r.json() if r.content else {}

    def pages(self, path: str, key: str, params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every item of a paginated list: Vultr's meta.links.next cursor or DigitalOcean's links.pages.next."""
        params = dict(params or {})
        seen = 0
        while True:
            body = self.json("GET", path, params=params)
            items = body.get(key) or []
            yield from items
            seen += len(items)
            nxt_cursor = ((body.get("meta") or {}).get("links") or {}).get("next")
            nxt_url = ((body.get("links") or {}).get("pages") or {}).get("next")
            if nxt_cursor:
                params["cursor"] = nxt_cursor
            elif nxt_url:
                page = httpx.URL(nxt_url).params.get("page")
                if not page or not items:
                    return
                params["page"] = page
            else:
                return


class _Unanswered(Exception):
    """A create whose answer was lost or asked for a retry, and that ``find`` did not find."""

    def __init__(self, r: httpx.Response | None):
        super().__init__()
        self.response = r
        self.status = r.status_code if r is not None else "no answer"


def rate_limit_reset(r: httpx.Response) -> float | None:
    """When a 429's exhausted window resets (DigitalOcean: ``ratelimit-remaining: 0`` and
    ``ratelimit-reset``, epoch seconds); None for any other answer (a burst limit, a 5xx)."""
    if r.status_code != 429 or r.headers.get("ratelimit-remaining") != "0":
        return None
    try:
        return float(r.headers["ratelimit-reset"])
    except (KeyError, ValueError):
        return None


def _retryable(r: httpx.Response) -> bool:
    return r.status_code in RETRY_STATUS


def _answer(state: RetryCallState) -> httpx.Response | None:
    """The HTTP answer behind a try's outcome, if there was one."""
    outcome = state.outcome
    if outcome is None:
        return None
    if outcome.failed:
        e = outcome.exception()
        return e.response if isinstance(e, _Unanswered) else None
    r = outcome.result()
    return r if isinstance(r, httpx.Response) else None


def _what(state: RetryCallState) -> str:
    r = _answer(state)
    if r is not None:
        return f"answered {r.status_code}"
    e = state.outcome.exception() if state.outcome is not None and state.outcome.failed else None
    return f"failed ({e})" if e else "got no answer"


def _last_answer(state: RetryCallState) -> httpx.Response:
    """Retries ran out: the last answer goes to the caller, or the connection error is raised."""
    assert state.outcome is not None
    answer: httpx.Response = state.outcome.result()
    return answer


def api_error(cloud: str, method: str, path: str, r: httpx.Response) -> ProviderError:
    try:
        body = r.json()
        msg = body.get("error") or body.get("message") or r.text
    except ValueError:
        msg = r.text
    return ProviderError(f"{cloud}: {method} {path} answered {r.status_code}: {str(msg)[:300]}")


def refusal_reason(message: str) -> RefusalReason:
    """A create refusal's kind for the provisioning record: an account limit, or the cloud out of stock."""
    return "quota" if re.search(r"limit|quota", message, re.I) else "capacity"


# "sold out" with a space or a hyphen (Vultr's own wording was "temporarily sold-out")
CAPACITY_RE = re.compile(r"not available|unavailable|out of stock|insufficient|capacity|sold[ -]?out|limit", re.I)


class RestProvider(CloudProvider[None]):
    """The create/poll/list/delete cycle both REST clouds share; subclasses say how their API spells it.

    Idempotency without client tokens: create first lists the run's nodes by tag and returns the
    target's node if one exists; a create whose answer was lost (timeout, 5xx) is reconciled by
    listing again before it is retried.
    """

    name: str
    collection: str  # e.g. "bare-metals"
    one_key: str  # e.g. "bare_metal"
    many_key: str  # e.g. "bare_metals"
    tag_param: str  # list filter query parameter
    page_size = 100
    tag_codec: node_tags.Labels = node_tags.LABELS

    def __init__(
        self,
        credentials: dict[str, Any] | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        backoff_s: float = 0.5,
        poll_s: float = 5.0,
        **options: Any,
    ):
        creds = credentials or {}
        self.base_url = creds.get("base_url") or provider_info(self.name).api_base or ""
        self.address_map_url = creds.get("address_map_url")
        self.poll_s = float(creds.get("poll_s", poll_s))
        self.api = RestClient(
            self.base_url,
            creds.get("token", ""),
            cloud=self.name,
            transport=transport,
            backoff_s=float(creds.get("backoff_s", backoff_s)),
            rate_limit_wait_s=float(creds.get("rate_limit_wait_s", RATE_LIMIT_WAIT_S)),
        )

    # what subclasses provide ------------------------------------------------------
    def create_body(self, target: Target, region: str, tags: list[str], script: str) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, raw: dict[str, Any]) -> tuple[str, str | None, str]:
        """(state pending|running|terminated, public IPv4 or None, region) of one API object."""
        raise NotImplementedError

    def default_regions(self, target: Target) -> list[str]:
        return list(target.instance.regions)

    # shared cycle -------------------------------------------------------------------
    def _to_instance(self, raw: dict[str, Any]) -> Instance:
        tags = self.tag_codec.decode(raw.get("tags"))
        state, ip, region = self.parse(raw)
        created = raw.get("date_created") or raw.get("created_at")
        return listed_instance(
            self.name,
            str(raw["id"]),
            tags,
            state,
            ip,
            self.address_map_url,
            instance_type=str(raw.get("plan") or raw.get("size_slug") or ""),
            region=region,
            launched_at=_epoch(created),
            cloud_state=raw.get("status"),
        )

    # the lifecycle's hooks (base.CloudProvider.create) -------------------------------------------
    def require(self, target: Target) -> None:
        if not rest_options(target).ingress_cidr:
            raise ProviderError(
                f"targets.{target.name}.provider_options.ingress_cidr: set the CIDR the benchmark "
                f"client reaches the node from (e.g. 203.0.113.7/32); {self.name} nodes are "
                "firewalled on the host to that CIDR only"
            )

    def find_existing(self, target: Target, run_id: str) -> Instance | None:
        return self._find(run_id, target.slug)

    def placements(self, target: Target, context: None) -> list[Placement]:
        return [Placement(r) for r in list(rest_options(target).regions) or self.default_regions(target)]

    def launch(
        self,
        target: Target,
        run_id: str,
        place: Placement,
        script: str,
        tags: dict[str, str],
        spec: LaunchSpec,
        context: None,
    ) -> Instance:
        """One POST, never re-sent blindly (a lost answer is looked for by tag before a retry)."""
        answer = self.api.create(
            self.collection,
            self.create_body(target, place.region, self.tag_codec.encode(tags), script),
            find=lambda: self._find(run_id, target.slug),  # lost answer: did it create anyway?
            what=f"create {place.instance_type} in {place.region} (POST {self.collection})",
        )
        if isinstance(answer, Instance):
            return answer
        if answer.status_code in (200, 201, 202):
            return self._to_instance(answer.json()[self.one_key])
        err = api_error(self.name, "POST", self.collection, answer)
        if answer.status_code in (400, 403, 412, 422) and CAPACITY_RE.search(str(err)):
            raise Refused(refusal_reason(str(err)), str(answer.status_code), str(err).split(": ", 2)[-1][:80])
        raise err

    def capacity_advice(self, target: Target) -> str:
        return f"Add regions to targets.{target.name}.provider_options.regions or try later"

    def _find(self, run_id: str, slug: str) -> Instance | None:
        return next((i for i in self.list_tagged(run_id) if i.target == slug), None)

    def check_ready(self, instance: Instance) -> Instance | None:
        return reachable(
            self,
            instance,
            ended=lambda i: i.state in ("terminated", "failed"),
            status=lambda i: i.cloud_state,
        )

    def describe(self, instance_id: str) -> Instance | None:
        r = self.api.request("GET", f"{self.collection}/{instance_id}")
        if r.status_code == 404:
            return None
        if r.status_code != 200:
            raise api_error(self.name, "GET", f"{self.collection}/{instance_id}", r)
        return self._to_instance(r.json()[self.one_key])

    def terminate(self, instance_id: str) -> bool:
        r = self.api.request("DELETE", f"{self.collection}/{instance_id}")
        if r.status_code == 404:
            return False
        if r.status_code not in (200, 202, 204):
            raise api_error(self.name, "DELETE", f"{self.collection}/{instance_id}", r)
        log.info("%s: deleted %s", self.name, instance_id)
        return True

    def listings(self, tag: str) -> dict[str, dict[str, Any]]:
        """The list queries (by name) that together show every node bakeoff makes carrying ``tag``."""
        return {self.collection: {self.tag_param: tag}}

    def list_tagged(self, run_id: str | None = None) -> list[Instance]:
        """The run's nodes (or every bakeoff node), from every query of ``listings``, filtered by tag
        here as well (a query may return more). A query that fails makes the listing partial
        (PartialListing): what the others found is acted on, and the caller does not report success."""
        tag = node_tags.Labels.run(run_id) if run_id else node_tags.PREFIX
        out: dict[str, Instance] = {}
        errors: dict[str, str] = {}
        queries = self.listings(tag)
        for what, query in queries.items():
            try:
                raws = list(self.api.pages(self.collection, self.many_key, {**query, "per_page": self.page_size}))
            except ProviderError as e:
                errors[what] = str(e)
                continue
            for raw in raws:
                if tag not in (raw.get("tags") or []):
                    continue
                inst = self._to_instance(raw)
                if inst.run_id and (run_id is None or inst.run_id == run_id) and inst.state != "terminated":
                    out.setdefault(inst.id, inst)
        if len(errors) == len(queries):  # nothing listed at all: one error, as for an unreachable cloud
            raise ProviderError("; ".join(dict.fromkeys(errors.values())))
        if errors:
            raise PartialListing(self.name, list(out.values()), errors)
        return list(out.values())


def rest_options(target: Target) -> RestOptions:
    """A REST cloud target's options: plan/target.py reads vultr and digitalocean ones as RestOptions."""
    return cast("RestOptions", target.provider_options)


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
