"""``bakeoff bench``: benchmark one endpoint by hand, outside Airflow, with the DAG's own code.

    python -m bakeoff bench --endpoint http://127.0.0.1:8000 --model M
        --workload workload.yaml --slo ttft_p99_ms=500,tpot_p99_ms=40 [--api-key-env VAR] [--gpus 8]

Writes the same per-request and per-point Parquet files the DAG writes (under --out, default the
results root) plus summary.json, and prints one line per point.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from bakeoff import store
from bakeoff.paths import results_root, safe_name


@dataclass
class AdhocTarget:
    """What the sweep needs of a target when there is no plan: a name and the GPU divisor."""

    name: str
    gpus_used: int = 1

    @property
    def slug(self) -> str:
        return safe_name(self.name.lower())


def _mapping(text: str, what: str) -> dict:
    """A YAML/JSON file, inline JSON/YAML, or k=v,k=v."""
    p = Path(text)
    if p.is_file():
        raw = yaml.safe_load(p.read_text())
    elif "=" in text and not text.lstrip().startswith("{"):
        raw = {}
        for part in text.split(","):
            k, _, v = part.partition("=")
            raw[k.strip()] = yaml.safe_load(v)
    else:
        raw = yaml.safe_load(text)
    if not isinstance(raw, dict):
        raise SystemExit(f"--{what}: expected a file, JSON/YAML mapping or key=value list, got {text!r}")
    return raw


def _parse_model(cls, raw: dict, what: str):
    try:
        return cls.model_validate(raw)
    except ValidationError as e:
        lines = [f"  {'.'.join(str(x) for x in err['loc']) or what}: {err['msg'].removeprefix('Value error, ')}"
                 for err in e.errors()]
        raise SystemExit(f"--{what} is not valid:\n" + "\n".join(lines)) from None


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("bench", help="benchmark one OpenAI-compatible endpoint (no Airflow)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True, help="model id the server answers to")
    p.add_argument("--workload", default="name=adhoc",
                   help="Workload as a YAML/JSON file, inline mapping or k=v list (e.g. "
                        "'name=w,input_len=1024,output_len=128,concurrency=[1,4,16]')")
    p.add_argument("--slo", default="", help="Slo as a file, mapping or k=v list (e.g. ttft_p99_ms=500,tpot_p99_ms=40)")
    p.add_argument("--api-key-env", help="environment variable holding the API key (never pass a key itself)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs serving the model (TP x PP): per-GPU divisor")
    p.add_argument("--target-name", default="endpoint", help="name for the results folder")
    p.add_argument("--run-id", default=None, help="default: adhoc-<UTC time>")
    p.add_argument("--out", type=Path, help="results folder (default: <results root>/adhoc/run_id=<id>/target=<name>)")
    p.add_argument("--max-error-rate", type=float, default=None, help="a point above it does not meet the SLOs")
    p.add_argument("--emulated", action="store_true", help="the endpoint is the hardware emulator")
    p.add_argument("--no-provenance", action="store_true", help="skip /version, /v1/models, /metrics snapshots")
    p.add_argument("--no-calibrate", action="store_true",
                   help="skip the client's self-calibration against a local scripted server")
    p.add_argument("--power-csv", type=Path,
                   help="GPU power samples (epoch_s,gpu,watts) the node's sampler appends: adds measured power per point")
    p.set_defaults(func=handle)
    return p


def handle(args: argparse.Namespace) -> int:
    from bakeoff.bench.sweep import run_workload
    from bakeoff.plan.settings import Slo
    from bakeoff.plan.workload import Workload
    from bakeoff.serving.endpoint import Endpoint

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    wl_raw = _mapping(args.workload, "workload")
    wl_raw.setdefault("name", "adhoc")
    workload = _parse_model(Workload, wl_raw, "workload")
    slo = _parse_model(Slo, _mapping(args.slo, "slo") if args.slo else {}, "slo")
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise SystemExit(f"--api-key-env: environment variable {args.api_key_env} is empty or unset; export it")
    if args.gpus < 1:
        raise SystemExit("--gpus: must be >= 1 (tensor_parallel x pipeline_parallel)")
    target = AdhocTarget(args.target_name, args.gpus)
    run_id = args.run_id or time.strftime("adhoc-%Y%m%dT%H%M%SZ", time.gmtime())
    out = args.out or store.target_dir("adhoc", run_id, target.slug, results_root())
    endpoint = Endpoint(target=target.slug, base_url=args.endpoint, model=args.model, stack="unknown",
                        emulated=args.emulated)
    doc = {"endpoint": args.endpoint, "model": args.model, "workload": workload.model_dump(mode="json"),
           "slo": slo.model_dump(mode="json"), "gpus": args.gpus, "run_id": run_id, "emulated": args.emulated}
    summaries = run_workload(endpoint, target, workload, slo, Path(out), run_id, api_key, args.emulated,
                             max_error_rate=args.max_error_rate, provenance=not args.no_provenance,
                             calibrate=not args.no_calibrate, power=_power(args.power_csv))
    doc["points"] = summaries
    cal = store.read_json(Path(out) / "client_calibration.json")
    if cal:
        doc["calibration"] = cal
        if cal.get("ttft_error_ms_mean") is not None:
            print(f"client self-calibration: TTFT error {cal['ttft_error_ms_mean']:+.2f} ms mean, "
                  f"{cal['ttft_error_ms_p99']:+.2f} ms p99 (C={cal['concurrency']})")
    sla = store.read_json(Path(out) / f"sla-{workload.name}.json")
    if sla:
        doc["sla"] = sla
    store.write_json(Path(out) / "summary.json", doc)
    label = " EMULATED" if args.emulated else ""
    for s in summaries:
        print(f"{s['load_mode']:>11} {s['concurrency']:>6} r{s['repeat']}: {s['completed']:>5} ok {s['failed']:>4} failed  "
              f"TTFT p99 {s['ttft_ms_p99']:8.1f} ms  TPOT p50 {s['tpot_ms_p50']:7.2f} ms  "
              f"{s['output_tps_per_gpu']:9.1f} out tok/s/GPU  SLO {'met' if s['meets_slo'] else 'missed'}"
              f"{'  CLIENT-BOUND' if s['client_bound'] else ''}"
              f"{_watts(s)}{label}")
    if sla:
        print(f"SLA search: highest {sla['over']} meeting every SLO = {sla['best']} "
              f"({sla['best_output_tps_per_gpu']} out tok/s/GPU); first failing {sla['first_failing']}")
    print(f"results: {out}")
    return 0


def _watts(s: dict) -> str:
    w = s.get("power_w_per_gpu")
    return f"  {w:6.0f} W/GPU" if w is not None and w == w else ""


def _power(path: Path | None):
    from bakeoff.serving.power import PowerFile
    return PowerFile(str(path)) if path else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bakeoff")
    add_parser(ap.add_subparsers(dest="command", required=True))
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
