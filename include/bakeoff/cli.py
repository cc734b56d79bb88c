"""`python -m bakeoff ...`: the library without Airflow.

plan check   validate a plan file and print what it resolves to
run          a whole bake-off in this process (same steps as the DAG, teardown guaranteed)
summary      the latest run's report path and headline table
bench        benchmark one endpoint by hand
reap         terminate expired or orphaned bakeoff instances
agent        the node agent (started on a serving node by its boot script)
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
import uuid
from pathlib import Path

from bakeoff import pipeline, store
from bakeoff.bench.client_cores import client_cores, line, warnings
from bakeoff.budget import BudgetExceeded, estimate
from bakeoff.plan import PlanError, load_plan
from bakeoff.providers.credentials import credentials_from_env
from bakeoff.report.headline import headline_table


def _plan_check(args) -> int:
    plan = load_plan(args.plan)
    for t in plan.targets:
        hardware = f"{t.instance_type or 'described hardware'} ({t.instance.gpus}x {t.gpu.name})"
        print(
            f"{t.name}: {t.provider} {hardware}, {t.stack}, "
            f"{t.model} {t.quantization} TP{t.tensor_parallel}, {t.usd_per_hour:.2f} USD/h [{t.price_source}]"
        )
    est = estimate(plan)
    print(f"budget: estimate {est['estimate_usd']} USD of {est['cap_usd']} USD cap")
    for row in client_cores(plan):
        print(line(row))
    for w in warnings(plan):
        print(f"warning: {w}")
    return 0


def _run(args) -> int:
    """Sequential bake-off: per target provision..benchmark with terminate in finally, then the rest."""
    # SIGTERM (a CI timeout, a closed terminal) must still reach the finally blocks that terminate.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run_id = args.run_id or f"cli__{time.strftime('%Y%m%dT%H%M%S')}_{uuid.uuid4().hex[:6]}"
    creds = credentials_from_env
    run = pipeline.start_run(args.plan, run_id, {"targets": args.targets or []})
    failed = []
    for slug in run["targets"]:
        inst = None
        try:
            rdir = run["run_dir"]
            inst = pipeline.provision(rdir, slug, credentials=creds)
            ready = pipeline.until_done(pipeline.node_ready, rdir, slug, inst, credentials=creds)
            pipeline.deploy(rdir, slug, ready)
            ep = pipeline.until_done(pipeline.serving_ready, rdir, slug, ready, credentials=creds)
            pipeline.accuracy_gate(rdir, slug, ep)
            pipeline.until_done(pipeline.benchmark_done, rdir, slug, ep, pipeline.benchmark(rdir, slug, ep))
        except Exception as e:  # noqa: BLE001 - one target failing must not stop the others
            failed.append(slug)
            print(f"target {slug} failed: {type(e).__name__}: {e}", file=sys.stderr)
        finally:
            pipeline.terminate(run["run_dir"], slug, inst, credentials=creds)
    pipeline.sweep(run["run_dir"], credentials=creds)
    for name, step in (("validate", pipeline.validate), ("cost", pipeline.cost)):
        try:
            step(run["run_dir"])
        except Exception as e:  # noqa: BLE001 - a failed step is reported; the report still runs
            failed.append(name)
            print(f"step {name} failed: {type(e).__name__}: {e}", file=sys.stderr)
    try:  # this process is the run's orchestrator: it knows which steps failed
        pipeline.report(run["run_dir"], failed_steps=failed)
    except Exception as e:  # noqa: BLE001 - the summary and exit status still come out
        failed.append("report")
        print(f"step report failed: {type(e).__name__}: {e}", file=sys.stderr)
    _print_summary({**store.run_view(run["run_dir"]), "run_dir": run["run_dir"]}, failed)
    return 1 if failed else 0


def _plan_name(ref: str) -> str:
    """Runs are stored under the plan's own name, so a plan given as a file is looked up by the
    name inside it, not by its path."""
    if Path(ref).is_file() or ref.endswith((".yaml", ".yml")):
        return load_plan(ref).name
    return ref


def _summary(args) -> int:
    name = _plan_name(args.plan)
    runs = store.list_runs(name)
    if not runs:
        shown = repr(name) if name == args.plan else f"{name!r} (from {args.plan})"
        print(f"no runs stored for plan {shown}", file=sys.stderr)
        return 1
    _print_summary(runs[0])
    return 0


def _print_summary(run: dict, failed: list[str] | None = None) -> None:
    """The run's outcome (given, or as its report recorded it), report files and headline."""
    report = dict(run.get("report") or {})
    failed = report.pop("failed_steps", None) if failed is None else failed
    outcome = "not reported" if failed is None else (f"failed ({', '.join(failed)})" if failed else "success")
    print(f"run {run.get('run_id')} of plan {run.get('plan')}: {outcome}")
    for kind, path in sorted(report.items()):
        print(f"  {kind}: {path}")
    print(headline_table(run["run_dir"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bakeoff", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="check a plan file")
    p.add_argument("action", choices=["check"])
    p.add_argument("plan")
    p.set_defaults(func=_plan_check)
    p = sub.add_parser("run", help="run a whole bake-off without Airflow")
    p.add_argument("--plan", default="local-demo")
    p.add_argument("--targets", nargs="*")
    p.add_argument("--run-id")
    p.set_defaults(func=_run)
    p = sub.add_parser("summary", help="print the latest run's report paths and headline")
    p.add_argument("--plan", default="local-demo")
    p.set_defaults(func=_summary)
    for module in ("bakeoff.bench.cli", "bakeoff.reaper", "bakeoff.agent.cli"):
        __import__(module, fromlist=["add_parser"]).add_parser(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except PlanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BudgetExceeded as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
