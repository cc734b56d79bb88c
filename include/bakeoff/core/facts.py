"""What each step found, as frozen typed records, and the run as readers want it (``RunFacts``).

A step writes one record (``store.record``) and readers used to search the nested dicts for keys,
so two readers of one record could disagree (the re-provision re-check counted every launch, the
measured cost only the last). Here each step's facts are one model, checked where a record is read
back from JSON (``parse``: an error names the record and the field), and the figures readers need
are derived once, on the view: ``TargetFacts.launches`` and ``billed_hours`` over every launch.
Dicts exist only at the edges: a record's JSON in the store, a step's XCom.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

log = logging.getLogger(__name__)


def _epoch(v: object) -> Any:
    """An ISO 8601 time (as a record written by hand or another tool may hold) as epoch seconds;
    anything else is left for the float check to accept or refuse."""
    if isinstance(v, str):
        try:
            return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return v
    return v


# A moment: epoch seconds, or an ISO 8601 time read back as them.
Epoch = Annotated[float, BeforeValidator(_epoch)]


class RecordInvalid(ValueError):
    """A stored step record does not have the shape its step writes."""


class Fact(BaseModel):
    """One step's record: frozen, and no field a step does not write (a stray key is refused)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    STEP: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        """The record as the store keeps it (the JSON edge)."""
        return self.model_dump(mode="json")


F = TypeVar("F", bound=Fact)


def parse(kind: type[F], doc: Mapping[str, Any], where: str) -> F:
    """A record read back from JSON as its step's model; RecordInvalid names the record and field."""
    try:
        return kind.model_validate(dict(doc))
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(record)"
        raise RecordInvalid(
            f"{where}: {kind.STEP} record field {loc}: {err['msg']}; this record was not written by this "
            "version's step: re-run the step (a retry rewrites its own record) or delete the file"
        ) from None


class Launch(Fact):
    """One instance launched for a target: ``ended_at`` None while it may still bill."""

    STEP: ClassVar[str] = "provision.tries"
    instance_id: str | None = None
    launched_at: Epoch
    ended_at: Epoch | None = None


class LaunchIntent(Fact):
    """provision, before its cloud call: the launch's number and the expiry its tags carry, fixed at the
    first attempt so a retried create resends the same request under the same idempotency token."""

    STEP: ClassVar[str] = "launch"
    launch: int
    expires_at: float


Count = Annotated[int, Field(strict=True, ge=0)]  # a JSON integer, never a bool or a float
Seconds = Annotated[float, Field(ge=0)]
Timed = Literal["create_s", "running_s", "serving_ready_s"]  # the times added to how a create went


class AsGiven(BaseModel):
    """A nested record read back from every version's files: a key this version does not know is
    ignored, and it is stored with the keys it was given, no more (the JSON older readers know)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        doc: dict[str, Any] = handler(self)
        return {k: v for k, v in doc.items() if k in self.model_fields_set}


class PlacementRefusal(BaseModel):
    """One placement that refused the launch: where, which offer, capacity or quota, and the cloud's words."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    where: str = ""
    instance_type: str = ""
    reason: str = ""
    code: str = ""
    message: str = ""


class ProvisioningRecord(AsGiven):
    """How a create went (providers/base.Provisioning writes it; ``run/provisioning.py`` adds ``create_s``); a
    cluster's records its ``nodes`` and ``ready_s``. ``running_s`` / ``serving_ready_s`` are folded in
    when read (``TargetFacts.provisioning``) from the node_ready and deploy records; runs of earlier
    versions stored them here.

    It is read back from every version's files, so it is lenient where a step record is strict: a key
    this version does not know is ignored, and a value of the wrong type is dropped (logged, naming
    the key) rather than losing the run's report. It is stored with the keys it was given, no more
    (the JSON older readers know)."""

    attempts: Count | None = None
    refusals: dict[str, Count] = {}  # by reason: capacity, quota
    refused: tuple[PlacementRefusal, ...] = ()
    instance_types: tuple[str, ...] = ()  # the offers tried, in order, once each
    tried: tuple[str, ...] = Field((), validation_alias=AliasChoices("tried", "offers"))  # places asked
    region: str | None = None
    placement: str | None = None
    instance_type: str | None = None
    reused: bool = False
    launch_s: Seconds | None = None
    create_s: Seconds | None = None
    running_s: Seconds | None = None
    serving_ready_s: Seconds | None = None
    nodes: Count | None = None
    ready_s: Seconds | None = None

    @field_validator("refusals", mode="before")
    @classmethod
    def _counts(cls, v: object) -> Any:
        """Each reason's count read on its own: one malformed entry does not drop the others."""
        if not isinstance(v, Mapping):
            return v
        return {k: n for k, n in v.items() if isinstance(n, int) and not isinstance(n, bool) and n >= 0}

    @model_validator(mode="wrap")
    @classmethod
    def _lenient(cls, data: object, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(data)
        except ValidationError as e:
            if not isinstance(data, Mapping):
                raise
            bad = {str(err["loc"][0]) for err in e.errors() if err["loc"]}
            log.warning("provisioning record: ignoring malformed %s", ", ".join(sorted(bad)))
            return handler({k: v for k, v in data.items() if k not in bad})

    def refusal_counts(self) -> dict[str, int]:
        """``{reason: count}`` of the reasons that refused at least once."""
        return {k: n for k, n in self.refusals.items() if n > 0}

    def timed(self, key: Timed) -> bool:
        """Whether this time is already recorded (an earlier version's provision record holds them)."""
        return key in self.model_fields_set

    def with_time(self, key: Timed, seconds: float) -> ProvisioningRecord:
        return self.model_validate({**self.model_dump(mode="json"), key: seconds})


class Provision(Fact):
    """provision: the instance it started and every launch of the target in this run, oldest first."""

    STEP: ClassVar[str] = "provision"
    instance_id: str | None = None
    launched_at: Epoch | None = None
    client_bundle: str | None = None
    tries: tuple[Launch, ...] = ()
    # how the create went (attempts, refusals by reason, placements and offers tried, where it launched),
    # create_s, and the seconds to running and to serving-ready
    provisioning: ProvisioningRecord = ProvisioningRecord()
    requested_at: Epoch | None = None  # when this launch's create was asked: time to running counts from it

    def recorded_launches(self) -> tuple[Launch, ...]:
        """The launches as recorded (a record without ``tries`` names its one launch)."""
        if self.tries:
            return self.tries
        if self.launched_at is None:
            return ()
        return (Launch(instance_id=self.instance_id, launched_at=self.launched_at),)


class ProvisionRefused(Fact):
    """provision, when every region / AD / offer it asked refused for capacity or quota: no node, so
    no provision record; what was asked is kept for the report's provisioning section and the
    stockout trend (a stockout is a procurement fact in itself)."""

    STEP: ClassVar[str] = "provision_refused"
    at: Epoch
    requested_at: Epoch | None = None
    reason: Literal["capacity", "quota"] = "capacity"
    offers: tuple[str, ...] = ()  # "<instance type> in <region or AD>", as the plan lists them
    error: str = ""  # the cloud's refusal in its words (truncated)
    provisioning: ProvisioningRecord = ProvisioningRecord()  # what the provider recorded of its attempts


class NodeReady(Fact):
    """node_ready: when the node was first seen running with an address (time to running)."""

    STEP: ClassVar[str] = "node_ready"
    instance_id: str | None = None
    running_at: Epoch


class Deploy(Fact):
    """serving_ready: the server answers with the right model (emulated: backed by the emulator)."""

    STEP: ClassVar[str] = "deploy"
    ready: bool = False
    base_url: str | None = None
    emulated: bool = False
    ready_at: Epoch | None = None  # when it first served the model (time to serving-ready)


class Accuracy(Fact):
    """accuracy_gate: the score on the accuracy set (the pass rule is applied at validation)."""

    STEP: ClassVar[str] = "accuracy"
    score: float | None = None
    n: int | None = None
    mean_output_tokens: float | None = None


class Benchmark(Fact):
    """benchmark / benchmark_done: how many points were stored, and where the client ran."""

    STEP: ClassVar[str] = "benchmark"
    points: int = 0
    client_mode: Literal["remote", "co-located"] | None = None


class Terminate(Fact):
    """terminate: every id it knew or found; ``terminated_at`` only when no termination failed."""

    STEP: ClassVar[str] = "terminate"
    instances: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    terminated_at: Epoch | None = None


class Sweep(Fact):
    """sweep: what it terminated per provider, and what it could not."""

    STEP: ClassVar[str] = "sweep"
    at: Epoch | None = None
    terminated: dict[str, tuple[str, ...]] = {}
    errors: tuple[str, ...] = ()


class BudgetRow(AsGiven):
    """One target's line of the budget guard's estimate (``spend.budget``): its hours and spend at the
    guard price, the band's low end and where its serving time comes from. Rows of earlier versions
    lack some figures (``usd_low``, ``basis``): None."""

    target: str | None = None
    provider: str | None = None
    usd_per_hour: float | None = None
    contract_usd_per_hour: float | None = None
    boot_h: float | None = None
    load_h: float | None = None
    download_h: float | None = None
    checkpoint_gb: float | None = None
    gate_h: float | None = None
    bench_h: float | None = None
    serving_margin: float | None = None
    basis: str | None = None
    hours: float | None = None
    usd: float | None = None
    usd_low: float | None = None  # the band's low end: serving time at its prediction, without the margin
    spends: bool = False  # the target bills money (not emulated, not an existing endpoint)
    kill_switch_s: int | None = None


class BudgetEstimate(AsGiven):
    """The budget guard's estimate a run started with (``spend.budget.check``): the cap, the estimate
    with and without the serving margin, the installation ceiling and one row per target."""

    cap_usd: float | None = None
    estimate_usd: float | None = None
    estimate_low_usd: float | None = None
    margin: float = 0.0
    ceiling_usd: float | None = None
    targets: tuple[BudgetRow, ...] = ()


class ApprovalNeed(AsGiven):
    """Whether a person must approve the run's spend before it provisions, and why
    (``spend.approval.requirement``), bound to the digest of the plan content it was admitted with."""

    required: bool = False
    spend_usd: float | None = None
    threshold_usd: float | None = None
    plan_sha256: str | None = None
    reason: str | None = None


class TargetStart(Fact):
    STEP: ClassVar[str] = "start.targets"
    name: str | None = None


class Start(Fact):
    """start_run: the run's identity, the budget guard's estimate and the planned targets."""

    STEP: ClassVar[str] = "start"
    plan: str | None = None
    run_id: str | None = None
    started_at: Epoch | None = None
    emulated: bool = False
    budget: BudgetEstimate = BudgetEstimate()
    targets: dict[str, TargetStart] = {}
    price_sheet_sha256: str | None = None  # the buyer's whole sheet, for the evidence bundle
    conf: dict[str, Any] = {}  # the trigger's configuration as given, so the run can be started again
    scheduled: bool = False
    approval_needed: ApprovalNeed = ApprovalNeed()


class Validation(Fact):
    """validate: whether every gate passed, and the targets that failed one (quarantined)."""

    STEP: ClassVar[str] = "validation"
    passed: bool | None = None
    failed_targets: tuple[str, ...] = ()


class Report(Fact):
    """report: the report files by kind (html, md, pdf, csv, ...) and the steps the orchestrator saw fail.
    Stored flat, as earlier versions wrote it: each kind a key beside ``failed_steps``."""

    STEP: ClassVar[str] = "report"
    files: dict[str, str] = {}
    failed_steps: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, data: object) -> Any:
        if not isinstance(data, Mapping) or "files" in data:
            return data
        return {
            "failed_steps": data.get("failed_steps") or (),
            "files": {k: v for k, v in data.items() if k != "failed_steps"},
        }

    @model_serializer(mode="wrap")
    def _stored_flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        doc: dict[str, Any] = handler(self)
        return {**doc.pop("files"), **doc}


class Approval(Fact):
    """approve_spend: the run's approval record, its latest state (pending, then the decision), signed by
    the installation over the run, the plan content's digest, the decision and who gave it."""

    STEP: ClassVar[str] = "approval"
    decision: str
    recorded_at: Epoch | None = None
    run_id: str | None = None
    plan_sha256: str | None = None
    signature: str | None = None
    reason: str | None = None
    shown: dict[str, str] | None = None
    approvers: list[dict[str, str]] | None = None
    spend_usd: float | None = None
    timeout_h: float | None = None
    by: dict[str, Any] | None = None
    at: Epoch | None = None
    error: str | None = None

    def as_shown(self) -> dict[str, Any]:
        """The record as the manifest and the dashboard keep it: the keys it was written with."""
        return self.model_dump(mode="json", exclude_unset=True)


class EvaluationCost(Fact):
    """sweep: the evaluation's measured spend (every launch's billed hours at its price)."""

    STEP: ClassVar[str] = "evaluation_cost"
    usd: float


TARGET_STEPS: tuple[type[Fact], ...] = (
    Provision,
    Deploy,
    Accuracy,
    Benchmark,
    Terminate,
    ProvisionRefused,
    NodeReady,
    LaunchIntent,
)
RUN_STEPS: tuple[type[Fact], ...] = (Sweep, Validation, Report, Approval, EvaluationCost)


class TargetFacts(BaseModel):
    """One target's records, with the figures derived from them."""

    model_config = ConfigDict(frozen=True)
    slug: str
    name: str | None = None
    provision: Provision | None = None
    deploy: Deploy | None = None
    accuracy: Accuracy | None = None
    benchmark: Benchmark | None = None
    terminate: Terminate | None = None
    provision_refused: ProvisionRefused | None = None
    node_ready: NodeReady | None = None
    launch: LaunchIntent | None = None

    def provisioning(self) -> ProvisioningRecord:
        """How the create went, with the seconds from the launch to running (node_ready's record, for
        this launch's instance) and to serving-ready (deploy's) folded in: each step writes only its own record."""
        prov = self.provision
        if prov is None:
            return ProvisioningRecord()
        record, launched = prov.provisioning, prov.launched_at
        if launched is None:
            return record
        ready = self.node_ready
        if ready is not None and ready.instance_id == prov.instance_id and not record.timed("running_s"):
            record = record.with_time("running_s", round(max(0.0, ready.running_at - launched), 1))
        served = self.deploy.ready_at if self.deploy is not None else None
        if served is not None and not record.timed("serving_ready_s"):
            record = record.with_time("serving_ready_s", round(max(0.0, served - launched), 1))
        return record

    def launches(self) -> tuple[Launch, ...]:
        """Every launch, oldest first, each ended at its own ``ended_at``, else at the termination
        recorded after it, else None (still billing)."""
        tries = self.provision.recorded_launches() if self.provision else ()
        term = self.terminate.terminated_at if self.terminate else None
        return tuple(
            tr
            if tr.ended_at is not None
            else tr.model_copy(update={"ended_at": term if term is not None and term >= tr.launched_at else None})
            for tr in tries
        )

    def running_since(self) -> float | None:
        """Start of a launch still billing (no end recorded), or None."""
        return next((tr.launched_at for tr in reversed(self.launches()) if tr.ended_at is None), None)

    def billed_seconds(self, now: float) -> float:
        """Seconds billed over every launch, a launch without an end counted up to ``now``."""
        total = 0.0
        for tr in self.launches():
            end = now if tr.ended_at is None else tr.ended_at
            total += max(0.0, end - tr.launched_at)
        return total

    def billed_hours(self, now: float) -> float:
        """``billed_seconds`` in hours: what the re-check and the measured cost both charge."""
        return self.billed_seconds(now) / 3600

    def first_launched_at(self) -> float | None:
        tries = self.launches()
        return tries[0].launched_at if tries else None

    def last_ended_at(self) -> float | None:
        """When the last launch ended; None when none was launched or one still bills."""
        tries = self.launches()
        if not tries or any(tr.ended_at is None for tr in tries):
            return None
        return max(tr.ended_at for tr in tries if tr.ended_at is not None)


class RunFacts(BaseModel):
    """The run as readers want it: its folder, start record, each target's records and the run-level
    steps' records (sweep, validation, report, approval, evaluation cost); the one reader of a run."""

    model_config = ConfigDict(frozen=True)
    run_dir: str = ""
    start: Start = Start()
    targets: dict[str, TargetFacts] = {}
    sweep: Sweep | None = None
    validation: Validation | None = None
    report: Report | None = None
    approval: Approval | None = None
    evaluation_cost: EvaluationCost | None = None

    @property
    def emulated(self) -> bool:
        """Planned on the emulator, or a (sandbox) cloud node the emulator backed."""
        return self.start.emulated or any(t.deploy is not None and t.deploy.emulated for t in self.targets.values())

    @property
    def run_id(self) -> str:
        """The run's id (its folder's name when no start record says it)."""
        return self.start.run_id or self.run_dir.rsplit("/", 1)[-1]

    def target(self, slug: str) -> TargetFacts:
        """A target's records; an empty view for a target with none yet."""
        return self.targets.get(slug) or TargetFacts(slug=slug)

    @classmethod
    def from_records(
        cls,
        run_steps: Mapping[str, Mapping[str, Any]],
        target_steps: Mapping[str, Mapping[str, Mapping[str, Any]]],
        where: str = "run",
    ) -> RunFacts:
        """From the raw records (step name -> facts), run-level and per target slug, as the store
        reads them; each checked against its step's model."""
        start = parse(Start, run_steps.get(Start.STEP) or {}, f"{where}/steps/start.json")
        found_run: dict[str, Fact] = {}
        for kind in RUN_STEPS:
            doc = run_steps.get(kind.STEP)
            if doc is not None:
                found_run[kind.STEP] = parse(kind, doc, f"{where}/steps/{kind.STEP}.json")
        targets: dict[str, TargetFacts] = {}
        for slug in dict.fromkeys([*start.targets, *target_steps]):
            steps = target_steps.get(slug) or {}
            found: dict[str, Fact] = {}
            for kind in TARGET_STEPS:
                doc = steps.get(kind.STEP)
                if doc is not None:
                    found[kind.STEP] = parse(kind, doc, f"{where}/target={slug}/steps/{kind.STEP}.json")
            planned = start.targets.get(slug)
            targets[slug] = TargetFacts.model_validate(
                {"slug": slug, "name": planned.name if planned else None, **found}
            )
        return cls.model_validate({"run_dir": where, "start": start, "targets": targets, **found_run})
