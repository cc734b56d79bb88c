"""The installed plans' predicted spend, precomputed for the trigger form.

The DAG's plan list shows each plan's predicted spend and its guard estimate (the twin's prediction plus
the margin for its error) without fitting the twin while the DAG file is parsed (parsing stays light:
this module reads one JSON file and hashes the plan files). ``bakeoff twin spend-index --write`` rebuilds
the file; a test fails when it is stale (a plan, the budget model or the twin changed). An entry is shown
only while its plan file's SHA-256 matches, so an edited or unknown plan shows no figure, never an old one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

INDEX = Path(__file__).with_name("predicted_spend.json")
SHIPPED = Path(__file__).resolve().parents[2] / "plans"  # include/plans: the plans the index is built from
COMMAND = "python -m bakeoff twin spend-index --write"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def entry(plan_file: Path) -> dict[str, Any]:
    """One plan's predicted spend (budget.estimate: the twin-priced run, then with its margin)."""
    from bakeoff.plan import load_plan  # noqa: PLC0415 - plans are parsed only when (re)building the index
    from bakeoff.spend.budget import estimate  # noqa: PLC0415 - the twin's fit only when (re)building the index

    est = estimate(load_plan(str(plan_file)))
    return {
        "sha256": digest(plan_file),
        "predicted_usd": est["estimate_low_usd"],
        "with_margin_usd": est["estimate_usd"],
        "cap_usd": est["cap_usd"],
        "bills": any(r.get("spends") for r in est["targets"]),  # False: every target emulated or an existing endpoint
    }


def build(folder: Path = SHIPPED) -> dict[str, Any]:
    from bakeoff.twin.calibration import source_line  # noqa: PLC0415 - the calibration set only when (re)building the index

    return {
        "generated_by": COMMAND,
        "twin": source_line(),
        "plans": {p.stem: entry(p) for p in sorted(folder.glob("*.yaml"))},
    }


def write(folder: Path = SHIPPED, index: Path = INDEX) -> dict[str, Any]:
    doc = build(folder)
    index.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc


def label(name: str, e: dict[str, Any]) -> str:
    """The plan list's entry: what the run would spend; a plan that bills nothing says 0, with what its
    hardware would cost at list prices beside it."""
    at_list = f"{e['predicted_usd']:,.0f} USD, {e['with_margin_usd']:,.0f} with the twin's error margin"
    if e.get("bills") is False:
        return f"{name} (predicted spend 0 USD: nothing billed; at list prices {at_list})"
    return f"{name} (predicted spend {at_list}; cap {e['cap_usd']:,.0f})"


def labels(folder: Path, index: Path = INDEX) -> dict[str, str]:
    """Plan name -> its form label with the predicted spend, for each plan in ``folder`` whose file is the
    one the index was built from; cheap (no plan parsing, no fit). Unreadable index: no labels."""
    try:
        plans = json.loads(index.read_text())["plans"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(plans, dict):
        return {}
    out = {}
    for path in sorted(folder.glob("*.yaml")):  # names from the folder, never paths from the file
        e = plans.get(path.stem)
        try:
            if isinstance(e, dict) and e.get("sha256") == digest(path):
                out[path.stem] = label(path.stem, e)
        except (OSError, KeyError, TypeError, ValueError):
            continue
    return out
