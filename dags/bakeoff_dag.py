"""The bakeoff DAG: one head-to-head evaluation, from provisioning to a published report.

Thin wiring only: every task calls one step of bakeoff.pipeline. Per target (mapped, one group per
provider so provisioning takes a slot of the provider's pool):
provision (setup) -> deploy -> accuracy gate -> benchmark -> terminate (teardown). Then, whatever
happened: sweep everything tagged with the run, validate, cost, report, publish. A watcher notes
any failed step (teardowns and all_done tasks would otherwise hide it), and a final all_done task
records the outcome in the results store once every step is done and, being the only leaf, fails
the DAG run when the run failed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pendulum
from airflow.sdk import Asset, AssetAlias, Param, dag, get_current_context, setup, task, task_group, teardown

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

PARAMS = {
    # A choice among the installed plans, never a path: start_run refuses anything else (also in
    # the Variable bakeoff_plan), since a path would run any YAML file on the worker. The form shows
    # null as "null" unless labelled, and labels unlisted values like null: label them all.
    "plan": Param(
        None,
        type=["null", "string"],
        enum=[None, *PLANS],
        title="Plan",
        values_display={"null": "(the scheduled plan: Variable bakeoff_plan)", **{p: p for p in PLANS}},
        description="One of the installed plans (include/plans, or $BAKEOFF_PLANS). Blank: the Airflow "
        "Variable bakeoff_plan, else local-demo.",
    ),
    "targets": Param(
        [],
        type="array",
        items={"type": "string"},
        title="Targets",
        description="Subset of the plan's target names; empty runs them all.",
    ),
    # Contract prices can also come from the Airflow Variable bakeoff_price_sheet (JSON); these win.
    # Bounds match the plan's fields (bakeoff.plan), so the form refuses what the plan would.
    "ttft_p99_ms": Param(None, type=["null", "number"], minimum=1, maximum=600_000, title="SLO: p99 TTFT (ms)"),
    "tpot_p50_ms": Param(None, type=["null", "number"], minimum=0.1, maximum=60_000, title="SLO: p50 TPOT (ms)"),
    "tpot_p99_ms": Param(None, type=["null", "number"], minimum=0.1, maximum=60_000, title="SLO: p99 TPOT (ms)"),
    "prices": Param(
        {},
        type="object",
        title="Contract prices",
        additionalProperties={"type": "number", "exclusiveMinimum": 0, "maximum": 10_000},
        description='USD per node-hour per target, e.g. {"mi355x-vllm": 40.0}; overrides the catalog in '
        "the cost report. The budget guard still prices each node at least at list.",
    ),
    "utilisation": Param(
        None,
        type=["null", "number"],
        minimum=0.01,
        maximum=1,
        title="Utilisation",
        description="Share of paid hours actually serving (cost is divided by it).",
    ),
    "budget_usd": Param(
        None,
        type=["null", "number"],
        minimum=1,
        maximum=100_000,
        title="Budget cap (USD)",
        description="Spend cap for this run; at most the installation ceiling (Airflow Variable "
        "bakeoff_budget_ceiling_usd, default 1000 USD).",
    ),
}

DEFAULT_ARGS = {"owner": "bakeoff", "retries": 1, "retry_delay": pendulum.duration(seconds=20)}


# Every provider a plan may name; each gets its own mapped group (and pool bakeoff_<provider>).
PROVIDERS = ("local", "static", "aws", "vultr", "digitalocean", "oci")

# Mapped task instances are labelled with their target in the UI.
LABEL = "{{ target_label }}"


def _pipeline(item: dict | None = None, credentials: bool = False):
    """The library's pipeline module, imported at run time (never at parse time)."""
    from bakeoff import pipeline

    if credentials:
        from bakeoff_hooks import install_credentials

        install_credentials()
    if item is not None:  # a per-target task: label it, and mask the run's serving keys in its log
        from bakeoff_hooks import mask_run_keys

        get_current_context()["target_label"] = item["slug"]
        mask_run_keys(item["run_dir"])
    return pipeline


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
)
def bakeoff():
    # Tasks inside the mapped group the watcher must see (never the setup task: Airflow refuses a
    # non-all_success trigger rule right after a setup).
    watched_in_group: list = []
    teardowns: list = []

    @task(retries=0)
    def start_run() -> dict:
        from airflow.sdk import Variable

        from bakeoff.plan import installed_plan_path

        ctx = get_current_context()
        params = ctx["params"]
        if params.get("plan"):
            plan = installed_plan_path(params["plan"], "params.plan")
        else:
            plan = installed_plan_path(Variable.get("bakeoff_plan", default="local-demo"), "Variable bakeoff_plan")
        sheet = Variable.get("bakeoff_price_sheet", default=None, deserialize_json=True)
        # The installation's spend ceiling: no plan or trigger may ask for more (unset: the default).
        ceiling = Variable.get("bakeoff_budget_ceiling_usd", default=None)
        return _pipeline().start_run(
            plan, ctx["run_id"], _overrides(params), price_sheet=sheet, budget_ceiling_usd=ceiling
        )

    @task
    def targets_of(run: dict, provider: str) -> list[dict]:
        return [{"run_dir": run["run_dir"], "slug": s} for s, p in run["providers"].items() if p == provider]

    def evaluate_on(provider: str):
        """One mapped group per provider, so provisioning takes a slot of that provider's pool
        (pools are sized to each account's GPU quota; a mapped task's pool cannot vary per target)."""

        @task_group(group_id=provider)
        def evaluate(item: dict):
            @setup
            @task(map_index_template=LABEL, pool=f"bakeoff_{provider}")
            def provision(item: dict) -> dict:
                return _pipeline(item, credentials=True).provision(item["run_dir"], item["slug"])

            @task(retries=0, map_index_template=LABEL)
            def deploy(item: dict, instance: dict) -> dict:
                return _pipeline(item, credentials=True).deploy(item["run_dir"], item["slug"], instance)

            @task(retries=0, map_index_template=LABEL)
            def accuracy_gate(item: dict, endpoint: dict) -> dict:
                return _pipeline(item).accuracy_gate(item["run_dir"], item["slug"], endpoint)

            @task(retries=0, map_index_template=LABEL)
            def benchmark(item: dict, endpoint: dict, gate: dict) -> dict:
                return _pipeline(item).benchmark(item["run_dir"], item["slug"], endpoint)

            @teardown
            @task(map_index_template=LABEL)
            def terminate(item: dict, instance: dict | None) -> dict:
                return _pipeline(item, credentials=True).terminate(item["run_dir"], item["slug"], instance)

            inst = provision(item)
            ep = deploy(item, inst)
            gate = accuracy_gate(item, ep)
            bench = benchmark(item, ep, gate)
            done = terminate(item, inst)
            bench >> done
            watched_in_group.extend([ep, gate, bench])
            teardowns.append(done)

        return evaluate

    @task(trigger_rule="all_done")
    def sweep(run: dict) -> dict:
        return _pipeline(credentials=True).sweep(run["run_dir"])

    @task(trigger_rule="all_done", retries=0)
    def validate(run: dict) -> dict:
        return _pipeline().validate(run["run_dir"])

    @task(trigger_rule="all_done")
    def cost(run: dict) -> dict:
        return _pipeline().cost(run["run_dir"])

    @task(trigger_rule="all_done")
    def report(run: dict) -> dict:
        return _pipeline().report(run["run_dir"])

    @task(outlets=[REPORTS])
    def publish(run: dict, paths: dict) -> dict:
        from bakeoff_hooks import s3_publish_args

        pipeline = _pipeline()
        published = pipeline.publish(run["run_dir"], paths, **s3_publish_args())
        get_current_context()["outlet_events"][REPORTS].add(
            Asset(published["asset_uri"]), extra={"plan": run["plan"], **published}
        )
        return published

    @task(trigger_rule="one_failed", retries=0)
    def watcher(run: dict) -> None:
        """Record that a step failed, so finish fails the DAG run: teardowns and all_done tasks
        would otherwise hide it."""
        _pipeline().mark_failed(run["run_dir"], "a step failed (see the failed tasks of this DAG run)")
        raise RuntimeError(f"a bake-off step failed; everything measured is kept under {run['run_dir']}")

    @task(trigger_rule="all_done", retries=0)
    def finish(run: dict) -> str:
        """Record the outcome once everything is done (the reaper treats the run as ended from here),
        then fail if the run failed: Airflow decides a DAG run's state from its leaves, and this
        all_done task is the only one, so succeeding here would turn a failed run green."""
        status = _pipeline().finish(run["run_dir"])
        if status != "success":
            raise RuntimeError(
                f"the bake-off run ended {status}: see the failed tasks of this DAG run; "
                f"everything measured is kept under {run['run_dir']}"
            )
        return status

    run = start_run()
    groups = [evaluate_on(p).expand(item=targets_of.override(task_id=f"{p}_targets")(run, p)) for p in PROVIDERS]
    swept = sweep(run)
    groups >> swept
    teardowns >> swept
    checked = validate(run)
    swept >> checked
    headline = cost(run)
    checked >> headline
    paths = report(run)
    headline >> paths
    published = publish(run, paths)
    watched = [*watched_in_group, swept, checked, headline, paths, published]
    watch = watcher(run)
    watched >> watch
    [swept, published, watch] >> finish(run)


bakeoff()
