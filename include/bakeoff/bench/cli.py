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
import textwrap
import time
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from bakeoff import store
from bakeoff.bench import console
from bakeoff.bench.client.workloads import WorkloadFileError
from bakeoff.bench.load.point import AdhocTarget
from bakeoff.bench.sessions.session_sources import fit, read_logs, write_trace
from bakeoff.bench.sessions.workload import expected_hit_rate
from bakeoff.core.endpoint import Endpoint
from bakeoff.core.pinning import check_cert
from bakeoff.paths import results_root
from bakeoff.plan.slo import Slo
from bakeoff.plan.workload import Workload
from bakeoff.serving.power import PowerFile
from bakeoff.serving.provenance import identify_engine, snapshot_provenance

_M = TypeVar("_M", bound=BaseModel)


def _split_top(text: str) -> list[str]:
    """Split k=v,k=v on the commas outside brackets, so concurrency=[1,4,16] stays one value."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _mapping(text: str, what: str) -> dict[str, Any]:
    """A YAML/JSON file, inline JSON/YAML, or k=v,k=v (values in YAML: [1,4,16], true, 0.5)."""
    p = Path(text)
    inline = text.lstrip().startswith("{")  # a mapping, never a file name (it may be longer than one may be)
    try:
        if not inline and p.is_file():
            raw = yaml.safe_load(p.read_text())
        elif "=" in text and not inline:
            raw = {}
            for part in _split_top(text):
                k, eq, v = part.partition("=")
                if not eq or not k.strip():
                    raise SystemExit(
                        f"--{what}: {part.strip()!r} is not key=value; write e.g. "
                        f"name=w,input_len=1024,concurrency=[1,4,16]"
                    )
                raw[k.strip()] = yaml.safe_load(v)
        else:
            raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        # a YAML error says its problem; other parse errors (JSON, a bad value) have only their type
        where = getattr(e, "problem", None) or type(e).__name__
        raise SystemExit(
            f"--{what}: cannot read {text!r} as YAML ({where}); give a file, a mapping such as "
            f"'{{concurrency: [1, 4, 16]}}' or key=value pairs such as concurrency=[1,4,16]"
        ) from None
    if not isinstance(raw, dict):
        raise SystemExit(f"--{what}: expected a file, JSON/YAML mapping or key=value list, got {text!r}")
    return raw


def _keys_help(cls: type[BaseModel], skip: tuple[str, ...] = ()) -> str:
    """One line per settable key of a plan model, from its own field descriptions."""
    lines = []
    for name, f in cls.model_fields.items():
        if name in skip:
            continue
        default = "required" if f.is_required() else f"default {f.get_default(call_default_factory=True)!r}"
        ann = f.annotation
        choices = [
            str(c)
            for a in (ann, *typing.get_args(ann))
            if typing.get_origin(a) is typing.Literal
            for c in typing.get_args(a)
        ]
        head = f"{name} ({default}{'; one of ' + ', '.join(choices) if choices else ''})"
        text = head + (f": {f.description}" if f.description else "")
        lines.append(textwrap.fill(text, 100, initial_indent="  ", subsequent_indent="      "))
    return "\n".join(lines)


def _epilog() -> str:
    return (
        "workload keys (--workload; the same as a plan's workloads):\n"
        + _keys_help(Workload)
        + "\n\nSLO keys (--slo; none set: every point is reported without an SLO verdict):\n"
        + _keys_help(Slo)
    )


def _parse_model(cls: type[_M], raw: dict[str, Any], what: str) -> _M:
    try:
        return cls.model_validate(raw)
    except ValidationError as e:
        lines = [
            f"  {'.'.join(str(x) for x in err['loc']) or what}: {err['msg'].removeprefix('Value error, ')}"
            for err in e.errors()
        ]
        raise SystemExit(f"--{what} is not valid:\n" + "\n".join(lines)) from None


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "bench",
        help="benchmark one OpenAI-compatible endpoint (no Airflow)",
        description=__doc__,
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--endpoint", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True, help="model id the server answers to")
    p.add_argument(
        "--workload",
        default="name=adhoc",
        help="Workload as a YAML/JSON file, inline mapping or k=v list (e.g. "
        "'name=w,input_len=1024,output_len=128,concurrency=[1,4,16]')",
    )
    p.add_argument("--slo", default="", help="Slo as a file, mapping or k=v list (e.g. ttft_p99_ms=500,tpot_p99_ms=40)")
    p.add_argument("--api-key-env", help="environment variable holding the API key (never pass a key itself)")
    p.add_argument(
        "--tls-cert",
        type=Path,
        default=None,
        help="an https endpoint's own certificate (PEM file): trust only it (a bakeoff node's cert)",
    )
    p.add_argument("--gpus", type=int, default=1, help="GPUs serving the model (TP x PP): per-GPU divisor")
    p.add_argument("--target-name", default="endpoint", help="name for the results folder")
    p.add_argument("--run-id", default=None, help="default: adhoc-<UTC time>")
    p.add_argument("--out", type=Path, help="results folder (default: <results root>/adhoc/run_id=<id>/target=<name>)")
    p.add_argument("--max-error-rate", type=float, default=None, help="a point above it does not meet the SLOs")
    p.add_argument("--emulated", action="store_true", help="the endpoint is the hardware emulator")
    p.add_argument("--no-provenance", action="store_true", help="skip /version, /v1/models, /metrics snapshots")
    p.add_argument(
        "--no-calibrate", action="store_true", help="skip the client's self-calibration against a local scripted server"
    )
    p.add_argument(
        "--power-csv",
        type=Path,
        action="append",
        help="GPU power rows the node's samplers append (serving.gpu_counters): adds measured energy per point; "
        "give it twice for the library's counters first and the CLI sampler's rows as the fallback",
    )
    p.set_defaults(func=handle)
    add_sessions_parser(subparsers)
    return p


def add_sessions_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "sessions-from-logs",
        help="convert chat/agent logs (JSONL or CSV) into a session trace (mooncake/AIPerf form)",
        description="Convert a chat/agent log into a session trace a plan can replay (sessions: {source: "
        "trace, path: ...}). One row per turn: conversation_id, optional turn, prompt_tokens (the whole "
        "prompt) or new_tokens (what the turn adds), output_tokens, optional timestamp (epoch s or ISO 8601). "
        "Each turn's hash_ids keep the previous turn's full blocks, so the trace shares exactly what the "
        "conversation re-sends. Prints the trace's expected prefix-cache hit rate and the synthetic "
        "distributions fitted from it.",
    )
    p.add_argument("logs", type=Path, help="the log file (.jsonl, or .csv with a header row)")
    p.add_argument("out", type=Path, help="the trace file to write (JSONL)")
    p.add_argument("--block-tokens", type=int, default=512, help="tokens per hash_ids block (a multiple of 16)")
    p.set_defaults(func=sessions_from_logs)
    return p


def sessions_from_logs(args: argparse.Namespace) -> int:
    if args.block_tokens < 16 or args.block_tokens % 16:
        raise SystemExit(f"--block-tokens: {args.block_tokens} is not a positive multiple of 16; use e.g. 512")
    if not args.logs.is_file():
        raise SystemExit(f"logs: no file {args.logs}; give the path of a .jsonl or .csv log")
    try:
        sessions = read_logs(args.logs, args.block_tokens)
    except WorkloadFileError as e:
        raise SystemExit(f"error: {e}") from None
    lines = write_trace(sessions, args.out)
    spec = fit(sessions, args.block_tokens)
    hit = expected_hit_rate(sessions, args.block_tokens)
    print(f"{len(sessions)} sessions, {lines} turns -> {args.out}")
    print(f"expected prefix-cache hit rate (unbounded cache, 16-token server blocks): {hit:.1%}")
    print(
        f"fitted: turns mean {spec.turns.mean:.1f} max {spec.turns.max:g}; first prompt mean "
        f"{spec.first_prompt_tokens.mean:.0f} tokens; new tokens/turn mean {spec.new_tokens_per_turn.mean:.0f}; "
        f"output mean {spec.output_tokens.mean:.0f}"
    )
    return 0


def handle(args: argparse.Namespace) -> int:
    # the benchmark (aiohttp, uvloop, its worker pool) loads when it runs, not when `bakeoff --help`
    # builds every command's parser
    from bakeoff.bench.run import run_workload  # noqa: PLC0415 - start-up cost of every bakeoff command

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
    tls_cert = None
    if args.tls_cert:
        try:
            tls_cert = check_cert(args.tls_cert.read_text(), "--tls-cert")
        except OSError as e:
            raise SystemExit(f"--tls-cert: cannot read {args.tls_cert.name}: {e.strerror}") from None
        except ValueError as e:
            raise SystemExit(str(e)) from None
        if not args.endpoint.startswith("https://"):
            raise SystemExit("--tls-cert: the endpoint must be an https:// URL to pin a certificate")
    endpoint = Endpoint(
        target=target.slug,
        base_url=args.endpoint,
        model=args.model,
        stack="unknown",
        emulated=args.emulated,
        tls_cert=tls_cert,
    )
    engine = _engine(endpoint, api_key) if not args.no_provenance else {"stack": "unknown"}
    endpoint.stack = engine["stack"]
    doc = {
        "endpoint": args.endpoint,
        "model": args.model,
        "workload": workload.model_dump(mode="json"),
        "slo": slo.model_dump(mode="json"),
        "gpus": args.gpus,
        "run_id": run_id,
        "emulated": args.emulated,
        **engine,
    }
    summaries = run_workload(
        endpoint,
        target,
        workload,
        slo,
        store.at(out),
        run_id,
        api_key,
        args.emulated,
        max_error_rate=args.max_error_rate,
        provenance=not args.no_provenance,
        calibrate=not args.no_calibrate,
        power=_power(args.power_csv),
    )
    doc["points"] = summaries
    cal = store.read_json(store.at(out) / "client_calibration.json")
    if cal:  # its one line was logged when it was measured
        doc["calibration"] = cal
    sla = store.read_json(store.at(out) / f"sla-{workload.name}.json")
    if sla:
        doc["sla"] = sla
    store.write_json(store.at(out) / "summary.json", doc)
    judged = console.slo_given(slo, args.max_error_rate)
    for s in summaries:
        print(console.point_line(s, judged=judged, emulated=args.emulated))
        for line in console.point_warnings(s, store.at(out), workload.name):
            print(line)
    if sla:
        print(
            f"SLA search: highest {sla['over']} meeting every SLO = {sla['best']} "
            f"({sla['best_output_tps_per_gpu']} out tok/s/GPU); first failing {sla['first_failing']}"
        )
    print(f"results: {out}")
    return 0


def _engine(endpoint: Endpoint, api_key: str | None) -> dict[str, Any]:
    """The engine as the server names itself (never fatal: "unknown" when it does not say)."""
    try:
        return identify_engine(snapshot_provenance(endpoint, api_key))
    except Exception as e:  # noqa: BLE001 - provenance must never cost a measurement
        return {"stack": "unknown", "identified_from": None, "error": type(e).__name__}


def _power(paths: list[Path] | None) -> PowerFile | None:
    """The first --power-csv read first, the second where the first has no rows in a point's window."""
    if not paths:
        return None
    return PowerFile(str(paths[0]), fallback=str(paths[1]) if len(paths) > 1 else None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bakeoff")
    add_parser(ap.add_subparsers(dest="command", required=True))
    args = ap.parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
