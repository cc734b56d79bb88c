"""`bakeoff catalog gpus|instances|models|engines|prices`: what a plan can name, each fact with its source
and date, so a plan's author need not read the YAML files."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from bakeoff import catalog

Rows = list[tuple[str, ...]]


def _dated(source: str, as_of: str) -> str:
    return f"{source or 'no source'}, {as_of or 'undated'}"


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def gpus(_: argparse.Namespace) -> Rows:
    rows: Rows = [("gpu", "vendor", "HBM (GB)", "HBM (TB/s)", "FP8 dense (TFLOPS)", "precisions", "TDP (W)", "source")]
    for g in catalog.gpus().values():
        rows.append(
            (g.name, g.vendor, f"{g.hbm_gb:g}", f"{g.hbm_tbps:g}", _num(g.fp8, 0), ", ".join(g.precisions) or "-")
            + (f"{g.tdp_w:g}", _dated(g.source, g.as_of))
        )
    return rows


def instances(args: argparse.Namespace) -> Rows:
    rows: Rows = [("cloud", "instance type", "GPUs", "USD/hour", "market", "price source")]
    for it in catalog.instance_types().values():
        if args.cloud and it.provider != args.cloud:
            continue
        rows.append(
            (it.provider, it.type, f"{it.gpus}x {it.gpu}", _num(it.usd_per_hour), it.market)
            + (_dated(it.source, it.as_of) if it.usd_per_hour is not None else f"no price ({it.source})",)
        )
    return rows


def prices(args: argparse.Namespace) -> Rows:
    """Every priced offer per GPU-hour, cheapest first: the figure to compare across node sizes."""
    rows: Rows = [("gpu", "cloud", "instance type", "USD/GPU-hour", "USD/hour", "market", "source, as of")]
    priced = [it for it in catalog.instance_types().values() if it.usd_per_hour is not None]
    if args.cloud:
        priced = [it for it in priced if it.provider == args.cloud]
    for it in sorted(priced, key=lambda x: (x.gpu, (x.usd_per_hour or 0) / x.gpus)):
        per_gpu = (it.usd_per_hour or 0) / it.gpus
        rows.append((it.gpu, it.provider, it.type, _num(per_gpu), _num(it.usd_per_hour), it.market))
        rows[-1] += (_dated(it.source, it.as_of),)
    return rows


def models(_: argparse.Namespace) -> Rows:
    rows: Rows = [("model", "Hugging Face id", "params (B)", "active (B)", "context", "attention", "source")]
    for m in catalog.models().values():
        rows.append(
            (m.name, m.hf_id, f"{m.params_b:g}", f"{m.active_params_b:g}", f"{m.context:,}", m.attention)
            + (_dated(m.source, m.as_of),)
        )
    return rows


def engines(_: argparse.Namespace) -> Rows:
    rows: Rows = [("engine", "precisions", "speculative", "KV offload", "port")]
    for s in catalog.stacks().values():
        rows.append(
            (s.name, ", ".join(s.precisions), ", ".join(s.speculative) or "-", ", ".join(s.kv_offload) or "-")
            + (str(s.port),)
        )
    return rows


LISTS: dict[str, Callable[[argparse.Namespace], Rows]] = {
    "gpus": gpus,
    "instances": instances,
    "models": models,
    "engines": engines,
    "prices": prices,
}


def table(rows: Sequence[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell, header first."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _show(args: argparse.Namespace) -> int:
    rows = LISTS[args.what](args)
    print(table(rows))
    if args.what == "engines":  # one source for every engine's images and flags
        doc = catalog.serving()
        print("source: " + _dated(" ".join(str(doc.get("source", "")).split()), str(doc.get("as_of", ""))))
    print(f"{len(rows) - 1} {args.what}; the recipes built on them: bakeoff recipes list")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("catalog", help="list the catalog a plan names from (GPUs, instances, models, engines, prices)")
    p.add_argument("what", choices=sorted(LISTS), help="which list: " + ", ".join(LISTS))
    clouds = sorted({it.provider for it in catalog.instance_types().values()})
    p.add_argument("--cloud", choices=clouds, help="instances and prices: only this cloud's offers")
    p.set_defaults(func=_show)
