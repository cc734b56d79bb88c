"""The bakeoff DAG: one head-to-head evaluation, from provisioning to a published report.

Thin wiring only: every task calls one step of bakeoff.pipeline. Per target (mapped):
provision (setup) -> deploy -> accuracy gate -> benchmark -> terminate (teardown). Then, whatever
happened: sweep everything tagged with the run, validate, cost, report, publish. A final watcher
fails the run when any step failed, since teardowns and all_done tasks would otherwise hide it.
"""
from __future__ import annotations

import pendulum
from airflow.sdk import Asset, AssetAlias, Param, dag, get_current_context, setup, task, task_group, teardown

# publish emits Asset("bakeoff://reports/<plan>") through this alias, so downstream DAGs can
# schedule on one plan's reports.
REPORTS = AssetAlias("bakeoff-reports")

PARAMS = {
    "plan": Param("", type="string", title="Plan",
                  description="Plan name under include/plans or a path. Blank: the Airflow Variable "
                              "bakeoff_plan, else local-demo.", examples=["local-demo", "mi355x-vs-b200"]),
    "targets": Param([], type="array", items={"type": "string"}, title="Targets",
                     description="Subset of the plan's target names; empty runs them all."),
    "ttft_p99_ms": Param(None, type=["null", "number"], minimum=1, title="SLO: p99 TTFT (ms)"),
    "tpot_p50_ms": Param(None, type=["null", "number"], minimum=0.1, title="SLO: p50 TPOT (ms)"),
    "tpot_p99_ms": Param(None, type=["null", "number"], minimum=0.1, title="SLO: p99 TPOT (ms)"),
    "prices": Param({}, type="object", title="Contract prices",
                    description='USD per node-hour per target, e.g. {"mi355x-vllm": 40.0}; overrides the catalog.'),
    "utilisation": Param(None, type=["null", "number"], minimum=0.01, maximum=1, title="Utilisation",
                         description="Share of paid hours actually serving (cost is divided by it)."),
    "budget_usd": Param(None, type=["null", "number"], minimum=1, title="Budget cap (USD)"),
}

DEFAULT_ARGS = {"owner": "bakeoff", "retries": 1, "retry_delay": pendulum.duration(seconds=20)}


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

        from bakeoff import pipeline

        ctx = get_current_context()
        params = ctx["params"]
        plan = params.get("plan") or Variable.get("bakeoff_plan", default="local-demo")
        return pipeline.start_run(plan, ctx["run_id"], _overrides(params))

    @task
    def targets_of(run: dict) -> list[dict]:
        return [{"run_dir": run["run_dir"], "slug": s} for s in run["targets"]]

    @task_group(group_id="target")
    def evaluate(item: dict):
        @setup
        @task(map_index_template="{{ task.op_kwargs['item']['slug'] }}")
        def provision(item: dict) -> dict:
            from bakeoff_hooks import install_credentials

            from bakeoff import pipeline

            install_credentials()
            return pipeline.provision(item["run_dir"], item["slug"])

        @task(retries=0)
        def deploy(item: dict, instance: dict) -> dict:
            from bakeoff_hooks import install_credentials

            from bakeoff import pipeline

            install_credentials()
            return pipeline.deploy(item["run_dir"], item["slug"], instance)

        @task(retries=0)
        def accuracy_gate(item: dict, endpoint: dict) -> dict:
            from bakeoff import pipeline

            return pipeline.accuracy_gate(item["run_dir"], item["slug"], endpoint)

        @task(retries=0)
        def benchmark(item: dict, endpoint: dict, gate: dict) -> dict:
            from bakeoff import pipeline

            return pipeline.benchmark(item["run_dir"], item["slug"], endpoint)

        @teardown
        @task
        def terminate(item: dict, instance: dict | None) -> dict:
            from bakeoff_hooks import install_credentials

            from bakeoff import pipeline

            install_credentials()
            return pipeline.terminate(item["run_dir"], item["slug"], instance)

        inst = provision(item)
        ep = deploy(item, inst)
        gate = accuracy_gate(item, ep)
        bench = benchmark(item, ep, gate)
        done = terminate(item, inst)
        bench >> done
        watched_in_group.extend([ep, gate, bench])
        teardowns.append(done)

    @task(trigger_rule="all_done")
    def sweep(run: dict) -> dict:
        from bakeoff_hooks import install_credentials

        from bakeoff import pipeline

        install_credentials()
        return pipeline.sweep(run["run_dir"])

    @task(trigger_rule="all_done", retries=0)
    def validate(run: dict) -> dict:
        from bakeoff import pipeline

        return pipeline.validate(run["run_dir"])

    @task(trigger_rule="all_done")
    def cost(run: dict) -> dict:
        from bakeoff import pipeline

        return pipeline.cost(run["run_dir"])

    @task(trigger_rule="all_done")
    def report(run: dict, headline: dict) -> dict:
        from bakeoff import pipeline

        return pipeline.report(run["run_dir"])

    @task(outlets=[REPORTS])
    def publish(run: dict, paths: dict) -> dict:
        from bakeoff_hooks import s3_publish_args

        from bakeoff import pipeline

        published = pipeline.publish(run["run_dir"], paths, **s3_publish_args())
        pipeline.finish(run["run_dir"], "published")
        get_current_context()["outlet_events"][REPORTS].add(
            Asset(f"bakeoff://reports/{run['plan']}"), extra={"plan": run["plan"], **published})
        return published

    @task(trigger_rule="one_failed", retries=0)
    def watcher(run: dict) -> None:
        """Fail the DAG run when any step failed: teardowns and all_done tasks would hide it."""
        from bakeoff import pipeline

        pipeline.finish(run["run_dir"], "failed")
        raise RuntimeError(f"a bake-off step failed; everything measured is kept under {run['run_dir']}")

    run = start_run()
    groups = evaluate.expand(item=targets_of(run))
    swept = sweep(run)
    groups >> swept
    teardowns >> swept
    checked = validate(run)
    swept >> checked
    headline = cost(run)
    checked >> headline
    paths = report(run, headline)
    published = publish(run, paths)
    watched = [*watched_in_group, swept, checked, headline, paths, published]
    watched >> watcher(run)


bakeoff()
