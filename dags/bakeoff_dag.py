"""The bakeoff DAG: one head-to-head evaluation, from provisioning to a published report.

Thin wiring only: every task calls one step of bakeoff.run (steps.function finds it), and the per-target group and the
steps after it are built from the sequence bakeoff.run.steps declares (bakeoff run follows the same
one). First a gate: a scheduled run starts only from the Variable bakeoff_schedule_from on
(unpausing alone starts nothing); then the optional pre-flight (bakeoff.preflight: off, check first,
or pre-flight only). Per target (one group mapped over the run's targets, each map index labelled
with its target): wait_slot (until the target's nodes fit its cloud's node limit, the Variable
bakeoff_provider_node_limits) -> provision (setup) -> wait_node -> deploy -> wait_serving ->
accuracy gate -> benchmark -> wait_benchmark -> terminate (teardown), each wait a sensor in
reschedule mode, so no worker slot is held while a slot is awaited, a node boots, a model loads or a
co-located benchmark runs. Then, whatever happened: sweep everything tagged with the run, validate,
cost, report, publish. A watcher fails the DAG run when any step failed (teardowns and all_done
tasks would otherwise hide it). The run's state is Airflow's alone: report and publish read this DAG
run's failed tasks, the reaper asks whether the run is still going.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pendulum
from airflow.sdk import (
    Asset,
    AssetAlias,
    Param,
    PokeReturnValue,
    Variable,
    dag,
    get_current_context,
    setup,
    task,
    task_group,
    teardown,
)
from bakeoff_alerts import RunAlert, run_deadline
from bakeoff_approval import TASK_ID as APPROVAL_TASK
from bakeoff_approval import SpendApproval
from bakeoff_links import ReportLink

from bakeoff.prediction.spend_index import labels as spend_labels  # cheap: one JSON file, no fit
from bakeoff.run.steps import AFTER, PER_TARGET, Step  # cheap: the declared steps, nothing imported

# publish emits Asset("bakeoff://reports/<plan>") through this alias, so downstream DAGs can
# schedule on one plan's reports.
REPORTS = AssetAlias("bakeoff-reports")


def installed_plans() -> list[str]:
    """Plan names the trigger form offers: the *.yaml files of $BAKEOFF_PLANS, else include/plans.
    One directory listing at parse time (the library is not imported while parsing)."""
    folder = Path(os.environ.get("BAKEOFF_PLANS") or Path(__file__).resolve().parents[1] / "include" / "plans")
    try:
        return sorted(p.stem for p in folder.glob("*.yaml") if re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,63}", p.stem))
    except OSError:
        return []


PLANS = installed_plans()
# Each installed plan's predicted spend beside its name in the form, from the precomputed index (only
# for plan files it was built from; bakeoff twin spend-index --write rebuilds it).
PLAN_LABELS = spend_labels(
    Path(os.environ.get("BAKEOFF_PLANS") or Path(__file__).resolve().parents[1] / "include" / "plans")
)


def _slo_param(short: str, what: str, low: float, high: float) -> Param:
    """One SLO box of the trigger form: its unit and range in the help, and what blank keeps."""
    return Param(
        None,
        type=["null", "number"],
        minimum=low,
        maximum=high,
        title=f"SLO: {short} (ms)",
        description=f"{what}, in milliseconds ({low:,g} to {high:,g}). Blank: the plan's value.",
    )


PARAMS = {
    # A choice among the installed plans, never a path: start_run refuses anything else (also in
    # the Variable bakeoff_plan), since a path would run any YAML file on the worker. The form shows
    # null as "null" unless labelled, and labels unlisted values like null: label them all.
    "plan": Param(
        None,
        type=["null", "string"],
        enum=[None, *PLANS],
        title="Plan",
        values_display={
            "null": "(the scheduled plan: Variable bakeoff_plan)",
            **{p: PLAN_LABELS.get(p, p) for p in PLANS},
        },
        description="One of the installed plans (include/plans, or $BAKEOFF_PLANS). Blank: the Airflow "
        "Variable bakeoff_plan, else local-demo. Beside each shipped plan: its predicted spend (the calibrated "
        "twin) and the guard's estimate with the margin for the twin's error.",
    ),
    # Optional fields carry "null" in their type: Airflow's form marks a field required (*) otherwise.
    "targets": Param(
        None,
        type=["null", "array"],
        items={"type": "string"},
        title="Targets",
        description="Optional: the plan's targets to run, one name a line (e.g. mi355x-vllm). Blank: every "
        "target of the plan.",
    ),
    # Contract prices can also come from the Airflow Variable bakeoff_price_sheet (JSON); these win.
    # Bounds match the plan's fields (bakeoff.plan), so the form refuses what the plan would.
    "ttft_p99_ms": _slo_param("p99 TTFT", "Time to first token, 99th percentile", 1, 600_000),
    "tpot_p50_ms": _slo_param("p50 TPOT", "Time per output token, median", 0.1, 60_000),
    "tpot_p99_ms": _slo_param("p99 TPOT", "Time per output token, 99th percentile", 0.1, 60_000),
    # Contract prices as lines of the form, one target each ("mi355x-vllm = 40.0"), not a JSON editor:
    # Airflow's form shows an array of strings as a text box with one item a line. The pattern is
    # bakeoff.plan.PRICE_LINE (tests/dags checks they agree); start_run refuses a name not in the run,
    # naming it, and a price out of the plan's bounds.
    "prices": Param(
        None,
        type=["null", "array"],
        items={"type": "string", "pattern": r"^\s*([A-Za-z0-9][A-Za-z0-9_.-]*)\s*[=:]\s*([0-9]+(?:\.[0-9]+)?)\s*$"},
        title="Contract prices",
        description="Optional: one line per target, <target name> = <USD per node-hour>, e.g. mi355x-vllm = 40.0. "
        "Blank: the plan's prices, else the catalog (or the Variable bakeoff_price_sheet). A name not in the "
        "run is refused, naming it. The budget guard still prices each node at least at list.",
    ),
    "utilisation": Param(
        None,
        type=["null", "number"],
        minimum=0.01,
        maximum=1,
        title="Utilisation",
        description="Share of paid hours actually serving, from 0.01 to 1 (0.6 = 60%); cost per token is divided "
        "by it. Blank: the plan's value.",
    ),
    "preflight": Param(
        "off",
        type=["null", "string"],  # optional, like every field: blank is "off"
        enum=[None, "off", "check first", "pre-flight only"],
        title="Pre-flight",
        description="Ask each target's cloud first, with reads and dry runs only, whether its launch would "
        "work (bakeoff preflight): 'check first' stops the run before any spend if not, 'pre-flight only' "
        "checks and launches nothing.",
    ),
    "budget_usd": Param(
        None,
        type=["null", "number"],
        minimum=1,
        maximum=100_000,
        title="Budget cap (USD)",
        description="Spend cap for this run in USD (blank: the plan's value); at most the installation ceiling "
        "(Airflow Variable bakeoff_budget_ceiling_usd, default 1000 USD). The plan list shows each shipped "
        "plan's predicted spend and the estimate with the twin's margin; per target: bakeoff plan check PLAN, or "
        "bakeoff predict PLAN.",
    ),
}

DEFAULT_ARGS = {"owner": "bakeoff", "retries": 1, "retry_delay": pendulum.duration(seconds=20)}


# Tasks return dicts without saying so in their annotation: "-> dict" makes Airflow push every key
# as an XCom of its own as well.
# Mapped task instances are labelled with their target in the UI.
LABEL = "{{ target_label }}"

# Sensor pokes: a cloud node boots and loads weights for minutes, the emulator in about a second. Every
# target is a map index of one sensor, so each poke sets its own target's pace (_step_function, poke_s).
CLOUD_POKE_ENV = "BAKEOFF_CLOUD_POKE_S"
LOCAL_POKE_S = 2


def cloud_poke_s() -> float:
    """Seconds between a sensor's checks: 30 (a cloud node), or $BAKEOFF_CLOUD_POKE_S where everything
    answers at once (the sandbox's fake clouds, an installation that runs emulated or existing endpoints
    only), so a rehearsal does not wait half a minute per step."""
    raw = os.environ.get(CLOUD_POKE_ENV, "").strip()
    if not raw:
        return 30.0
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 1 <= value <= 300:
        raise ValueError(f"{CLOUD_POKE_ENV}={raw!r}: give the seconds between checks, from 1 to 300 (unset: 30)")
    return value


CLOUD_POKE_S = cloud_poke_s()


def _step_function(step: Step, item: dict | None = None):
    """The library function a declared step calls, imported at run time (never at parse time)."""
    from bakeoff.run.steps import function

    if item is not None:  # a per-target task: label it, and mask the run's serving keys in its log
        from bakeoff_connections import mask_run_keys

        ctx = get_current_context()
        ctx["target_label"] = item["slug"]
        mask_run_keys(item["run_dir"])
        if item.get("poke_s") and hasattr(ctx["task"], "poke_interval"):
            # a sensor's next check: one operator serves every map index, and the sensor reads its
            # interval after this poke, so a local target checks every 2 s beside a cloud's 30 s
            ctx["task"].poke_interval = float(item["poke_s"])
    return function(step)


def _credentials():
    """Provider credentials from Airflow connections (masked in this task's log), passed into a step."""
    from bakeoff_connections import credentials_resolver  # run time only, never at parse time

    return credentials_resolver()


def _failed_steps() -> list[str]:
    """This DAG run's failed tasks (mapped ones as <task>_<map index>): the run's outcome is Airflow's."""
    ctx = get_current_context()
    states = ctx["ti"].get_task_states(dag_id=ctx["dag"].dag_id, run_ids=[ctx["run_id"]])
    return sorted(t for t, state in (states.get(ctx["run_id"]) or {}).items() if state == "failed")


def _wait_began() -> float:
    """When this sensor's wait began (its first poke), as epoch seconds: checks measure their deadline from it."""
    ctx = get_current_context()
    first = ctx["ti"].get_first_reschedule_date(ctx)
    return first.timestamp() if first else pendulum.now("UTC").timestamp()


def _looked(found: dict | None) -> PokeReturnValue:
    """A sensor's poke from its check's answer: done with what it found, or None while waiting."""
    return PokeReturnValue(is_done=found is not None, xcom_value=found)


def _act(step: Step):
    """A declared step's task body: one call of its bakeoff.run function, on the target of the map
    index (per target) or on the run, with the outputs of the steps it takes."""

    def act(item: dict | None, *inputs):
        if item is None:  # a run step after start_run, which never ran (its gate failed): nothing started
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(f"{step.name}: start_run did not run, so this run started nothing")
        per_target = step.per_target
        call = _step_function(step, item if per_target else None)
        kwargs: dict = {"credentials": _credentials()} if step.credentials else {}
        if step.failed_steps:
            kwargs["failed_steps"] = _failed_steps()
        try:
            return call(item["run_dir"], *([item["slug"]] if per_target else []), *inputs, **kwargs)
        except BaseException:
            if step.role == "setup" and _last_try():  # terminate will not run: the node slot goes back
                from bakeoff.run.provisioning import release_node_slot

                release_node_slot(item["run_dir"], item["slug"])
            raise

    act.__name__ = act.__qualname__ = step.name
    return act


def _last_try() -> bool:
    """Whether no retry follows this try of the running task."""
    ctx = get_current_context()
    return ctx["ti"].try_number > ctx["task"].retries


def _look(step: Step):
    """A declared wait's sensor poke: a claim's answer as it is, a check's answer (None while waiting)
    as a poke that is done once it found something, measured from when this wait began."""

    def look(item: dict, *inputs):
        call = _step_function(step, item)
        if step.wait == "claim":
            return call(item["run_dir"], item["slug"])
        kwargs: dict = {"credentials": _credentials()} if step.credentials else {}
        return _looked(call(item["run_dir"], item["slug"], *inputs, _wait_began(), **kwargs))

    look.__name__ = look.__qualname__ = step.name
    return look


def _publish(run: dict, paths: dict):
    """publish: the evidence bundle and the index pages (bakeoff.run.pipeline.publish), then the plan's Asset."""
    from bakeoff.run import pipeline

    published = pipeline.publish(
        run["run_dir"],
        paths,
        failed_steps=_failed_steps(),
        refit_twin=Variable.get("bakeoff_twin_refit_after_publish", default=None),
    )
    get_current_context()["outlet_events"][REPORTS].add(
        Asset(published["asset_uri"]), extra={"plan": run["plan"], **published}
    )
    return published


def _plan_ref(params: dict) -> Path:
    """The installed plan the form (else the Variable bakeoff_plan) names, never a path."""
    from bakeoff.plan import installed_plan_path

    if params.get("plan"):
        return installed_plan_path(params["plan"], "params.plan")
    return installed_plan_path(Variable.get("bakeoff_plan", default="local-demo"), "Variable bakeoff_plan")


def _overrides(params: dict) -> dict:
    return {
        "targets": params.get("targets") or [],
        "slo": {k: params.get(k) for k in ("ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms")},
        "prices": params.get("prices") or {},
        "utilisation": params.get("utilisation"),
        "budget_usd": params.get("budget_usd"),
    }


@dag(
    dag_id="bakeoff",
    schedule="@monthly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params=PARAMS,
    default_args=DEFAULT_ARGS,
    tags=["bakeoff", "benchmark", "cost"],
    doc_md=__doc__,
    # A mail to the alert address (bakeoff_alerts) when the run fails, or is still going when its
    # hours are up; nothing is sent when no address is configured.
    on_failure_callback=RunAlert("failed"),
    deadline=run_deadline(),
)
def bakeoff():
    # Tasks inside the mapped group the watcher must see (never the setup task: Airflow refuses a
    # non-all_success trigger rule right after a setup).
    watched_in_group: list = []
    teardowns: list = []

    @task.short_circuit(retries=0)
    def schedule_gate() -> bool:
        """A scheduled run starts only from the Variable bakeoff_schedule_from on, so unpausing the DAG
        starts nothing by itself; when it returns False every later task is skipped, teardowns too."""
        from bakeoff.run.schedule_gate import VARIABLE, refusal

        run = get_current_context()["dag_run"]
        why = refusal(run.run_type, run.run_after, Variable.get(VARIABLE, default=None))
        if why:
            print(why)
        return why is None

    # "pre-flight only" returns False: every later task is skipped, whatever its trigger rule
    @task.short_circuit(retries=0, ignore_downstream_trigger_rules=True)
    def preflight() -> bool:
        from bakeoff.preflight import gate

        params = get_current_context()["params"]
        mode = params.get("preflight") or "off"
        if mode == "off":  # not asked for: nothing is read
            return True
        sheet = Variable.get("bakeoff_price_sheet", default=None, deserialize_json=True)
        return gate(_plan_ref(params), mode, _overrides(params), sheet, _credentials())

    @task(retries=0)
    def start_run():
        ctx = get_current_context()
        params = ctx["params"]
        sheet = Variable.get("bakeoff_price_sheet", default=None, deserialize_json=True)
        # The installation's spend ceiling: no plan or trigger may ask for more (unset: the default).
        ceiling = Variable.get("bakeoff_budget_ceiling_usd", default=None)
        # Above this estimated spend a person approves before anything is provisioned (approve_spend).
        threshold = Variable.get("bakeoff_approval_threshold_usd", default=None)
        plan = _plan_ref(params)
        # What a plan may reach: images trusted with secrets, private static endpoints (unset: no).
        from bakeoff.run import pipeline

        return pipeline.start_run(
            plan,
            ctx["run_id"],
            _overrides(params),
            price_sheet=sheet,
            budget_ceiling_usd=ceiling,
            conf={**params, "plan": Path(plan).stem},  # what "run again" triggers
            approval_threshold_usd=threshold,
            scheduled=ctx["dag_run"].run_type == "scheduled",
            trusted_images=Variable.get("bakeoff_trusted_images", default=None),
            allow_private_endpoints=Variable.get("bakeoff_allow_private_endpoints", default=None),
            # Nodes a run may hold at once per cloud (bakeoff.clusters.node_slots); a target needing more is refused.
            node_limits=Variable.get("bakeoff_provider_node_limits", default=None),
        )

    @task(trigger_rule="none_failed")  # after approve_spend: approved, or skipped (no approval needed)
    def targets_of(run: dict) -> list[dict]:
        """One item per target, in plan order, with the pace its sensors check at (its cloud's or local)."""
        from bakeoff.core.provider_facts import PROVIDERS as REGISTRY

        def poke_s(slug: str) -> float:
            return CLOUD_POKE_S if REGISTRY[run["providers"][slug]].provisions else LOCAL_POKE_S

        return [{"run_dir": run["run_dir"], "slug": s, "poke_s": poke_s(s)} for s in run["targets"]]

    def target_task(step: Step):
        """The task of one declared per-target step (bakeoff.run.steps.PER_TARGET): a sensor in reschedule mode
        for a wait, a setup or teardown task for the steps that start and end what costs money."""
        opts: dict = {"task_id": step.name, "map_index_template": LABEL}
        if step.retries is not None:
            opts["retries"] = step.retries
        if step.wait:
            # one sensor for every map index: poke_interval is the cloud's until a poke sets its target's
            return task.sensor(mode="reschedule", poke_interval=CLOUD_POKE_S, timeout=step.ceiling_s, **opts)(
                _look(step)
            )
        made = task(**opts)(_act(step))
        return setup(made) if step.role == "setup" else teardown(made) if step.role == "teardown" else made

    @task_group(group_id="target")
    def evaluate(item: dict):
        """One mapped group over the run's targets, each map index labelled with its target: the declared
        per-target steps in their order. Each long wait is a sensor in reschedule mode: its worker slot is
        free between pokes. wait_slot holds the target back until its nodes fit its cloud's node limit
        (bakeoff.clusters.node_slots); terminate gives them back."""
        out: dict = {}
        previous = None
        for step in PER_TARGET:
            out[step.name] = made = target_task(step)(item, *(out[t] for t in step.takes))
            if previous is not None:
                previous >> made
            previous = made
            if step.role == "teardown":
                teardowns.append(made)
            elif step.role != "setup":
                watched_in_group.append(made)

    def run_task(step: Step):
        """The task of one declared step after the targets (bakeoff.run.steps.AFTER), with its trigger rule."""
        opts: dict = {"task_id": step.name, "trigger_rule": step.trigger_rule}
        if step.retries is not None:
            opts["retries"] = step.retries
        if step.name == "publish":  # emits the plan's report Asset: downstream DAGs schedule on it
            return task(outlets=[REPORTS], **opts)(_publish)
        return task(**opts)(_act(step))

    @task(trigger_rule="one_failed", retries=0)
    def watcher(run: dict) -> None:
        """Fail the DAG run when any step failed: Airflow decides a run's state from its leaves, and
        teardowns and all_done tasks would otherwise hide a failure. Skipped when nothing failed."""
        raise RuntimeError(f"a bake-off step failed; everything measured is kept under {run['run_dir']}")

    run = start_run()
    schedule_gate() >> preflight() >> run
    # Nothing is provisioned before the spend is approved (or needs no approval; provision checks again).
    approved = SpendApproval(
        task_id=APPROVAL_TASK, run_dir="{{ ti.xcom_pull(task_ids='start_run')['run_dir'] }}", retries=0
    )
    run >> approved
    listed = targets_of(run)
    approved >> listed
    group = evaluate.expand(item=listed)
    out: dict = {}
    previous = None
    for step in AFTER:
        out[step.name] = made = run_task(step)(run, *(out[t] for t in step.takes))
        if previous is None:
            group >> made
            teardowns >> made
        else:
            previous >> made
        previous = made
    # the run's "Report" button (bakeoff_links)
    out["publish"].operator.operator_extra_links = (ReportLink(),)
    watched = [approved, *watched_in_group, *out.values()]
    watched >> watcher(run)


bakeoff()
