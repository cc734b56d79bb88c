"""The run's verdict on plan check's client sizing: the loop monitor's client-bound points against
the cores plan check said the top load needs, naming which of the two was wrong."""

import pandas as pd

from bakeoff.bench.client.client_cores import client_cores, sizing_check
from bakeoff.plan import load_plan, plan_from_dict, plans_dir


def _plan(workers=1, concurrency=(1, 4, 16)):
    doc = load_plan(plans_dir() / "local-demo.yaml").model_dump(mode="json", exclude_none=True)
    doc["workloads"][0].update(workers=workers, concurrency=list(concurrency))
    return plan_from_dict(doc)


def _points(bound):
    """Two repeats at c1, c4, c16 of the demo's workload; bound: the (concurrency, repeat) client-bound."""
    rows = [
        {"workload": "chat-1k-128", "concurrency": c, "repeat": r, "client_bound": (c, r) in bound}
        for c in (1, 4, 16)
        for r in (0, 1)
    ]
    return pd.DataFrame(rows)


def test_sizing_said_enough_but_the_monitor_saw_the_client_set_the_pace():
    plan = _plan()
    (row,) = client_cores(plan)
    assert row["cores_needed"] <= row["workers"]  # plan check: one process carries the demo
    (line,) = sizing_check(plan, _points({(16, 0), (16, 1), (4, 1)}))
    assert "yet the client set the pace at 3 of 6 points (c=4, c=16)" in line
    assert "the sizing was wrong" in line and "client_fleet" in line


def test_agreement_says_nothing_and_a_warned_shortfall_is_confirmed_or_called_pessimistic():
    plan = _plan()
    assert sizing_check(plan, _points(set())) == []
    big = _plan(concurrency=(1, 4, 2048))  # 2048 streams x 250 tok/s: more than one client core
    (row,) = client_cores(big)
    assert row["cores_needed"] > 1
    pts = _points(set()).assign(concurrency=lambda d: d["concurrency"].replace({16: 2048}))
    (line,) = sizing_check(big, pts)
    assert "the server set the pace at all 6 points: the sizing was pessimistic" in line
    pts.loc[pts["concurrency"] == 2048, "client_bound"] = True
    (line,) = sizing_check(big, pts)
    assert line.startswith(f"chat-1k-128: as plan check warned ({row['cores_needed']} client core(s) needed")
    assert sizing_check(plan, pd.DataFrame()) == []
