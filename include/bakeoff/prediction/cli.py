"""``bakeoff twin add-run RUN --plan PLAN`` and ``bakeoff twin refit``: a measured run's points join a
run-rows CSV with their provenance; a refit reads every run of a real target in the results store (plus
that CSV), prints the held-out error and saves the installation's calibration beside the runs (the
report's predicted-vs-measured table then shows the error before and after). The shipped calibration set
is never rewritten.
``bakeoff twin spend-index [--write]``: the installed plans' predicted spend the trigger form shows."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bakeoff.prediction import spend_index

DEFAULT_RUNS = "twin-runs.csv"


def _add_run(args: argparse.Namespace) -> int:
    from bakeoff import store  # noqa: PLC0415 - the results store only for add-run
    from bakeoff.plan import PlanError, load_plan  # noqa: PLC0415 - the plan only for add-run
    from bakeoff.prediction import runs  # noqa: PLC0415 - numpy only for this command

    try:
        plan = load_plan(args.plan)
    except PlanError as e:
        print(f"plan: {e}", file=sys.stderr)
        return 2
    run_dir = store.at(args.run)
    points = store.load_points(run_dir)
    if points.empty:
        print(f"run: no measured points under {args.run}; give a run folder (results/<plan>/<run id>)", file=sys.stderr)
        return 2
    try:
        rows = runs.run_rows(plan, points, str(points["run_id"].iloc[0]))
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 2
    if not rows:
        print("run: no concurrency point of a calibrated target to add", file=sys.stderr)
        return 2
    added = runs.write_rows(Path(args.into), rows)
    print(f"added {added} run rows ({len(rows) - added} already there) to {args.into}; bakeoff twin refit next")
    return 0


def _refit(args: argparse.Namespace) -> int:
    from bakeoff.prediction import runs  # noqa: PLC0415 - numpy only for this command

    extra = []
    if args.runs is not None or Path(DEFAULT_RUNS).exists():
        path = Path(args.runs or DEFAULT_RUNS)
        try:
            extra = runs.read_rows(path)
        except (OSError, ValueError) as e:
            print(f"runs: {e}", file=sys.stderr)
            return 2
    r = runs.refit_installation(args.root, extra, save=not args.dry_run)
    for line in r["skipped"]:
        print(f"  not a calibration row: {line}")
    if "run_rows" not in r:
        print("refit: no measured point of a real target in the results store or a run-rows CSV; nothing refitted")
        return 0

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}%"

    print(
        f"refit on {r['published_rows']} published rows + {r['run_rows']} run rows "
        f"({len(r['runs'])} runs{', ' + str(args.runs or DEFAULT_RUNS) if extra else ''})"
    )
    print(f"  shipped twin on the run rows (never seen): median APE {pct(r['shipped_on_run_rows_median_ape'])}")
    print(f"  random hold-out: median APE {pct(r['holdout_median_ape'])}")
    print(
        f"  out-of-fold: median APE {pct(r['out_of_fold_median_ape'])}, "
        f"run rows {pct(r['out_of_fold_run_rows_median_ape'])}"
    )
    print(f"  band +-{r['band_pct']}% (shipped +-{r['shipped_band_pct']}%)")
    print(
        f"the installation's calibration saved to {r['saved']} (the shipped set untouched); the report's "
        "predicted-vs-measured table shows the error before and after"
        if "saved" in r
        else "not saved (--dry-run)"
    )
    return 0


def _spend_index(args: argparse.Namespace) -> int:

    doc = spend_index.write() if args.write else spend_index.build()
    for name, e in doc["plans"].items():
        print(spend_index.label(name, e))
    print(f"written to {spend_index.INDEX.name} (the trigger form reads it)" if args.write else "not written (--write)")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("twin", help="teach the calibrated twin a measured run (add-run), then refit")
    tsub = p.add_subparsers(dest="twin_command", required=True)
    a = tsub.add_parser("add-run", help="a measured run's points as calibration rows, with their provenance")
    a.add_argument("run", help="the run's results folder")
    a.add_argument("--plan", required=True, help="the plan the run ran (name or file)")
    a.add_argument("--into", default=DEFAULT_RUNS, help=f"the run-rows CSV to append to (default {DEFAULT_RUNS})")
    a.set_defaults(func=_add_run)
    r = tsub.add_parser(
        "refit",
        help="fit on the published rows plus this installation's real runs; save its calibration beside them",
    )
    r.add_argument("--runs", default=None, help=f"a run-rows CSV to add too (default {DEFAULT_RUNS} if present)")
    r.add_argument("--root", default=None, help="the results store to read (default: the installation's)")
    r.add_argument("--dry-run", action="store_true", help="print the refit's figures; save nothing")
    r.set_defaults(func=_refit)
    s = tsub.add_parser(
        "spend-index", help="the installed plans' predicted spend, as the trigger form shows it (--write: rebuild)"
    )
    s.add_argument("--write", action="store_true", help="rewrite the index the DAG's plan list reads")
    s.set_defaults(func=_spend_index)
