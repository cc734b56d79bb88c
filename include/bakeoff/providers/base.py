"""The provider interface every cloud (and the local emulator) implements, and the one lifecycle clouds share.

Lifecycle: create -> check_ready (until it returns the node) -> describe -> terminate, plus
list_tagged to find leftovers by run tag even when the task that created them is gone. Every method
is safe to retry. check_ready is one look, so a sensor can free its worker between looks;
wait_ready loops over it for callers without a scheduler (the CLI).

``CloudProvider.create`` is the create of every cloud, written once (the copies had drifted): check
the target's options, reuse the run's node if a previous try made it, render the boot script, tag,
bootstrap the network, launch on each placement in order moving on at a capacity or quota refusal
(and, for a target listing several offers, ``instance_types``, every placement of one offer before
the next, each launched as the target on that offer: ``Target.ran_as``), record how it went
(``Provisioning``), and undo the network bootstrap when no node came of it. A cloud supplies only
its calls (the hooks below). A caller that builds something bigger from nodes (several per target)
calls this per-instance create with its own target and tags; nothing else.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast

# the interface's names for the tags every node carries (tags.py builds and encodes them)
from bakeoff.core.errors import ProviderError as ProviderError
from bakeoff.core.facts import ProvisioningRecord
from bakeoff.core.instance import Instance
from bakeoff.core.launch import LaunchSpec
from bakeoff.providers.tags import TAG_EXPIRES as TAG_EXPIRES
from bakeoff.providers.tags import TAG_INSTALLATION as TAG_INSTALLATION
from bakeoff.providers.tags import TAG_PLAN as TAG_PLAN
from bakeoff.providers.tags import TAG_PORT as TAG_PORT
from bakeoff.providers.tags import TAG_RUN as TAG_RUN
from bakeoff.providers.tags import TAG_TARGET as TAG_TARGET
from bakeoff.providers.tags import Labels, Pairs, node_tags

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.target import Target

log = logging.getLogger(__name__)
# what a cloud's ``prepare`` makes and its other hooks receive (None for a cloud that prepares nothing)
Context = TypeVar("Context")


class CapacityError(ProviderError):
    """No capacity for the instance type where it was asked for; ``provisioning`` is the lifecycle's
    record of the placements it tried, empty where none was kept."""

    provisioning: ProvisioningRecord = ProvisioningRecord()


RefusalReason = Literal["capacity", "quota"]


class Refused(CapacityError):
    """One placement refused the launch for capacity (the cloud is out of stock) or quota (an account
    limit): the lifecycle records it and tries the next placement; ``code`` is the cloud's own word."""

    def __init__(self, reason: RefusalReason, code: str, message: str = ""):
        super().__init__(f"{code}: {message}" if message else code)
        self.reason, self.code, self.detail = reason, code, message


class PartialListing(ProviderError):
    """A listing that reached some regions (or compartments) but not all: what it found, and where it failed.

    Teardown acts on ``found`` and reports ``errors``, so one region's outage never hides the nodes of
    the others; any other caller sees a ProviderError, as it cannot trust the listing to be complete.
    """

    def __init__(self, provider: str, found: list[Instance], errors: dict[str, str]):
        super().__init__(
            f"{provider}: could not list every region: " + "; ".join(f"{where}: {why}" for where, why in errors.items())
        )
        self.found, self.errors = found, dict(errors)


def reachable(
    provider: Provider,
    instance: Instance,
    *,
    ended: Callable[[Instance], bool],
    status: Callable[[Instance], object],
) -> Instance | None:
    """One look at a cloud node: running with an address, None while it boots, ProviderError once it ended."""
    cur = provider.describe(instance.id)
    if cur is None or ended(cur):
        raise ProviderError(
            f"{provider.name}: node {instance.id} ended before it was ready ({status(cur) if cur else 'gone'})"
        )
    if cur.state == "running" and cur.host and cur.port:
        return cur
    return None


def list_best_effort(provider: Provider, run_id: str | None) -> tuple[list[Instance], dict[str, str]]:
    """Whatever ``list_tagged`` could find, and where it could not look (empty when it saw everything)."""
    try:
        return provider.list_tagged(run_id), {}
    except PartialListing as e:
        return list(e.found), dict(e.errors)
    except Exception as e:  # noqa: BLE001 - a listing error must not stop the caller terminating what it knows
        return [], {provider.name: f"{type(e).__name__}: {e}"}


class Provider(abc.ABC):
    name: str
    poll_s: float | None = None  # how often wait_ready looks (None: a fiftieth of its timeout, 0.05 s to 5 s)
    # every node it creates runs the hardware emulator from its boot script (the local provider; a sandbox
    # cloud whose credentials say ``emulated_nodes``): what lets a cluster target run here (run/provisioning.py)
    emulated_nodes: bool = False

    def launched_emulated(self, instance_id: str) -> bool:
        """Whether this provider's own record says it launched ``instance_id`` emulator-backed: never the
        node's word (a custom image answers whatever it likes on /version). No record: False."""
        return False

    def include(self, targets: list[Target]) -> None:
        """Widen what ``list_tagged`` searches to where these plan targets launch (no-op for most clouds)."""
        return None

    @abc.abstractmethod
    def create(
        self, target: Target, run_id: str, *, tags: Mapping[str, str], spec: LaunchSpec | Mapping[str, Any]
    ) -> Instance:
        """Start (or find, if a previous try already started) the one instance for target in run_id.

        ``tags`` are the caller's (plan, expiry, installation; tags.node_tags adds run, target and port);
        ``spec`` what the node boots with (a mapping is read as a LaunchSpec). Idempotent per run and
        target slug: a caller placing several nodes for one plan target gives each its own slug."""

    @abc.abstractmethod
    def check_ready(self, instance: Instance) -> Instance | None:
        """One look: the node, running and reachable, or None while it boots; ProviderError once it ended."""

    def wait_ready(self, instance: Instance, timeout_s: float) -> Instance:
        """Look until the node is running and reachable; ProviderError when it ended or at the deadline."""
        poll_s = self.poll_s or min(5.0, max(0.05, timeout_s / 50))
        deadline = time.monotonic() + timeout_s
        while True:
            ready = self.check_ready(instance)
            if ready is not None:
                return ready
            if time.monotonic() >= deadline:
                raise ProviderError(
                    f"{self.name}: node {instance.id} not running with an address after {timeout_s:.0f}s"
                )
            time.sleep(min(poll_s, max(0.05, deadline - time.monotonic())))

    @abc.abstractmethod
    def describe(self, instance_id: str) -> Instance | None:
        """Current state, or None if the provider no longer knows it."""

    @abc.abstractmethod
    def terminate(self, instance_id: str) -> bool:
        """Terminate; True if something was terminated, False if already gone. Never raises for 'gone'."""

    @abc.abstractmethod
    def list_tagged(self, run_id: str | None = None) -> list[Instance]:
        """Live instances carrying bakeoff tags (all runs when run_id is None). A region that cannot be
        listed does not stop the others: the call then raises PartialListing with what it found."""


# --- one launch, typed ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where one launch is tried: a region, and a zone (EC2) or availability domain (OCI) within it."""

    region: str
    zone: str | None = None
    instance_type: str = ""

    @property
    def where(self) -> str:
        return self.zone or self.region


@dataclass
class Provisioning:
    """How a create went, for the provision record and the report: every placement tried, in order,
    with the refusals by reason (capacity, quota) and the cloud's words, where it launched, and the
    seconds the launch call took to be answered (``provisioning.provision`` adds the whole create's)."""

    attempts: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    refused: list[dict[str, str]] = field(default_factory=list)  # {where, instance_type, reason, code, message}
    tried: list[str] = field(default_factory=list)  # every attempt, in order: "<instance type> in <where>"
    instance_types: list[str] = field(default_factory=list)  # the offers tried, in order, once each
    region: str | None = None
    placement: str | None = None
    instance_type: str | None = None
    launch_s: float | None = None
    reused: bool = False

    def attempt(self, place: Placement) -> None:
        self.attempts += 1
        self.tried.append(f"{place.instance_type} in {place.where}" if place.instance_type else place.where)
        if place.instance_type and place.instance_type not in self.instance_types:
            self.instance_types.append(place.instance_type)

    def refuse(self, place: Placement, e: Refused) -> None:
        self.refusals[e.reason] = self.refusals.get(e.reason, 0) + 1
        self.refused.append(
            {
                "where": place.where,
                "instance_type": place.instance_type,
                "reason": e.reason,
                "code": e.code,
                "message": e.detail[:200],
            }
        )

    def took(self, place: Placement, seconds: float) -> None:
        self.region, self.placement, self.instance_type = place.region, place.where, place.instance_type
        self.launch_s = round(seconds, 3)

    def record(self) -> ProvisioningRecord:
        """The record as the provision step stores it: every field this lifecycle keeps."""
        return ProvisioningRecord.model_validate(asdict(self))


class CloudProvider(Provider, Generic[Context]):
    """The create every cloud shares (see the module docstring); a cloud implements the hooks.

    Hooks, in the order create calls them: ``require`` (the plan's options; ProviderError naming the
    field and the fix, before any call), ``find_existing`` (the run's node for the target, if a
    previous try made it), ``prepare`` (the network the node is launched behind; returns what launch
    needs), ``placements`` (where to try, in order), ``launch`` (one API launch: the Instance, or
    ``Refused`` for capacity or quota, or ProviderError), ``secured`` (after a node exists, new or
    reused), ``abandon`` (undo ``prepare`` when no node came of it), and ``capacity_scope`` /
    ``capacity_advice`` (where it looked, and what a person can change, when every placement refused).
    """

    tag_codec: Pairs | Labels  # how this cloud spells the tags

    def boot_script(self, target: Target, launch: LaunchSpec) -> str:
        """The node's user data for this launch, from the renderer the caller handed in with the spec
        (``LaunchSpec.boot``: serving.userdata's, which this package does not import)."""
        if launch.boot is None:
            raise ProviderError(
                f"{self.name}: targets.{target.name}: a cloud launch needs its boot script's renderer "
                "(LaunchSpec.boot, serving.userdata.render_for)"
            )
        return launch.boot(target, launch)

    def create(
        self, target: Target, run_id: str, *, tags: Mapping[str, str], spec: LaunchSpec | Mapping[str, Any]
    ) -> Instance:
        launch = LaunchSpec.of(spec)
        self.require(target)
        existing = self.find_existing(target, run_id)
        if existing is not None:
            log.info("%s: %s already has node %s for run %s; reusing it", self.name, target.slug, existing.id, run_id)
            self.secured(target, run_id, existing)
            existing.provisioning = Provisioning(reused=True).record()
            return existing
        script = self.boot_script(target, launch)
        labels = node_tags(tags, run_id, target.slug, target.stack_spec.port)
        record = Provisioning()
        context = self.prepare(target, run_id, labels)
        try:
            for offer, planned in self._offer_placements(target, context):
                place = planned if planned.instance_type else replace(planned, instance_type=offer.instance_type or "")
                record.attempt(place)
                started = time.monotonic()
                try:
                    inst = self.launch(offer, run_id, place, script, labels, launch, context)
                except Refused as e:
                    record.refuse(place, e)
                    log.warning(
                        "%s: %s refused %s (%s: %s); trying the next placement",
                        self.name,
                        place.where,
                        place.instance_type,
                        e.reason,
                        e.code,
                    )
                    continue
                record.took(place, time.monotonic() - started)
                log.info(
                    "%s: launched %s (%s) in %s for %s",
                    self.name,
                    inst.id,
                    place.instance_type,
                    place.where,
                    target.slug,
                )
                self.secured(target, run_id, inst)
                inst.provisioning = record.record()
                return inst
        except BaseException:
            self._undo(target, run_id, context)
            raise
        self._undo(target, run_id, context)
        several = len(target.offers) > 1
        tried = ", ".join(
            (f"{r['instance_type']} in " if several else "")
            + (f"{r['where']} ({r['code']}: {r['message']})" if r["message"] else f"{r['where']} ({r['code']})")
            for r in record.refused
        )
        err = CapacityError(
            f"{self.name}: no capacity for {' or '.join(target.offers) or target.instance_type}"
            f"{self.capacity_scope(context)}; "
            f"tried {tried or 'no placement'}. {self.capacity_advice(target)}"
        )
        err.provisioning = record.record()
        raise err

    def _offer_placements(self, target: Target, context: Context) -> Iterator[tuple[Target, Placement]]:
        """(the target on an offer, a placement), offer by offer in the plan's order, each offer's
        placements as ``placements`` gives them for it (its own catalog regions when the plan lists none)."""
        offers = target.offers
        for offer in [target.ran_as(x) for x in offers] if len(offers) > 1 else [target]:
            for planned in self.placements(offer, context):
                yield offer, planned

    def _undo(self, target: Target, run_id: str, context: Context) -> None:
        """``abandon``, never hiding why the create failed: its own error is logged (the sweep and the
        reaper remove what it left)."""
        try:
            self.abandon(target, run_id, context)
        except Exception as e:  # noqa: BLE001 - the create's own failure is what the caller must see
            log.warning("%s: could not undo the network of %s (run %s): %s", self.name, target.slug, run_id, e)

    # hooks -----------------------------------------------------------------------------------------
    @abc.abstractmethod
    def require(self, target: Target) -> None:
        """Refuse a target whose options cannot launch here, naming the field and the fix."""

    def find_existing(self, target: Target, run_id: str) -> Instance | None:
        """The run's live node for the target (a retried task, a create whose answer was lost)."""
        return next((i for i in self.list_tagged(run_id) if i.target == target.slug), None)

    def prepare(self, target: Target, run_id: str, tags: dict[str, str]) -> Context:
        """Make what the node is launched behind (a security group, a firewall); none by default (a
        cloud that keeps this default is a ``CloudProvider[None]``)."""
        return cast(Context, None)

    @abc.abstractmethod
    def placements(self, target: Target, context: Context) -> Iterator[Placement] | list[Placement]:
        """Where to try the launch, in the plan's order."""

    @abc.abstractmethod
    def launch(
        self,
        target: Target,
        run_id: str,
        place: Placement,
        script: str,
        tags: dict[str, str],
        spec: LaunchSpec,
        context: Context,
    ) -> Instance:
        """One launch at ``place``: the node, or Refused (capacity or quota: the next placement is tried)."""

    def secured(self, target: Target, run_id: str, inst: Instance) -> None:
        """After a node exists (made now or found): re-check what guards it; nothing by default."""
        return None

    def abandon(self, target: Target, run_id: str, context: Context) -> None:
        """Undo ``prepare`` when no node came of the create; nothing by default."""
        return None

    def capacity_scope(self, context: Context) -> str:
        """Words after the instance type in the no-capacity error (OCI: `` in <region>``)."""
        return ""

    def capacity_advice(self, target: Target) -> str:
        return f"Add placements to targets.{target.name}.provider_options or try later"
