"""DAG integrity: the DAG files import cleanly, fast, and keep the wiring the design relies on."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.utils.trigger_rule import TriggerRule

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def dagbag() -> DagBag:
    return DagBag(dag_folder=str(ROOT / "dags"))


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert {"bakeoff", "bakeoff_reaper"} <= set(dagbag.dag_ids)


@pytest.mark.parametrize("dag_id", ["bakeoff", "bakeoff_reaper"])
def test_tags_owner_retries(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    assert "bakeoff" in dag.tags
    assert dag.catchup is False
    for t in dag.tasks:
        assert t.owner == "bakeoff"
        assert t.retries is not None


def test_schedules(dagbag):
    assert dagbag.dags["bakeoff"].schedule == "@monthly"
    assert dagbag.dags["bakeoff_reaper"].schedule == "@hourly"


G = "target"  # the one mapped group: one map index per target of the run, whatever its provider
STEPS = ("wait_slot", "provision", "wait_node", "deploy", "wait_serving", "accuracy_gate", "benchmark")
STEPS += ("wait_benchmark", "terminate")


def test_one_group_over_the_runs_targets_and_one_targets_task(dagbag):
    """The grid shows what the plan runs: one group mapped over the run's targets (every provider's),
    each map index labelled with its target, fed by one targets task; no Airflow pool bounds a cloud
    (the library's node limit does: wait_slot)."""
    dag = dagbag.dags["bakeoff"]
    t = {task.task_id: task for task in dag.tasks}
    assert sorted({tid.split(".", 1)[0] for tid in t if "." in tid}) == [G]
    assert sorted(tid for tid in t if tid.startswith(f"{G}.")) == sorted(f"{G}.{s}" for s in STEPS)
    assert [tid for tid in t if "targets" in tid] == ["targets_of"]
    for step in STEPS:
        task = t[f"{G}.{step}"]
        assert task.map_index_template == "{{ target_label }}", step
        assert task.pool == "default_pool", step
    assert "targets_of" in t[f"{G}.wait_slot"].upstream_task_ids
    assert not (ROOT / "config" / "pools.json").exists()


def test_the_dag_shape_does_not_follow_the_installed_plans(dagbag, tmp_path, monkeypatch):
    """An installation whose plans name one provider gets the same group: nothing per provider is
    read at parse time, so a plan installed since the last parse runs without a reparse."""
    import yaml

    plan = yaml.safe_load((ROOT / "include" / "plans" / "local-demo.yaml").read_text())
    (tmp_path / "only-local.yaml").write_text(yaml.safe_dump(plan))
    monkeypatch.setenv("BAKEOFF_PLANS", str(tmp_path))
    dag = DagBag(dag_folder=str(ROOT / "dags" / "bakeoff_dag.py")).dags["bakeoff"]
    assert sorted(dag.task_ids) == sorted(dagbag.dags["bakeoff"].task_ids)


def test_setup_teardown_and_cleanup_wiring(dagbag):
    dag = dagbag.dags["bakeoff"]
    t = {task.task_id: task for task in dag.tasks}
    g = G
    assert t[f"{g}.provision"].is_setup
    assert t[f"{g}.terminate"].is_teardown
    assert f"{g}.provision" in t[f"{g}.terminate"].upstream_task_ids
    assert not t[f"{g}.wait_slot"].is_setup and not t[f"{g}.wait_slot"].is_teardown
    # the sweep runs whatever happened, after every teardown
    assert t["sweep"].trigger_rule == TriggerRule.ALL_DONE
    assert f"{g}.terminate" in t["sweep"].upstream_task_ids
    for name in ("validate", "cost", "report"):
        assert t[name].trigger_rule == TriggerRule.ALL_DONE
    # the watcher sees every failing step except setups, so the run's state tells the truth
    watcher = t["watcher"]
    assert watcher.trigger_rule == TriggerRule.ONE_FAILED
    assert {
        f"{g}.wait_slot",
        f"{g}.wait_node",
        f"{g}.deploy",
        f"{g}.wait_serving",
        f"{g}.benchmark",
        f"{g}.wait_benchmark",
        f"{g}.accuracy_gate",
        "sweep",
        "validate",
        "cost",
        "report",
        "publish",
    } <= watcher.upstream_task_ids
    assert f"{g}.provision" not in watcher.upstream_task_ids
    # Airflow decides the run's state from its leaves, and owns it alone: the watcher is the only
    # leaf (failing, once, when any step failed; skipped otherwise); no task records a second status
    assert [leaf.task_id for leaf in dag.leaves] == ["watcher"]
    assert watcher.retries == 0 and "finish" not in t


def test_waits_are_sensors_that_free_the_worker(dagbag):
    """Each long wait is a reschedule-mode sensor after its action, so the worker slot is free between
    pokes; Airflow's timeout is the plan fields' ceiling (the checks enforce each target's own). The
    node-limit wait comes first, before provision."""
    from bakeoff.plan import Plan
    from bakeoff.plan.options import ProviderOptions

    def ceiling(field) -> float:
        return next(m.le for m in field.metadata if hasattr(m, "le"))

    t = {task.task_id: task for task in dagbag.dags["bakeoff"].tasks}
    g = G
    timeouts = {
        "wait_slot": ceiling(ProviderOptions.model_fields["ready_timeout_s"]),
        "wait_node": ceiling(ProviderOptions.model_fields["ready_timeout_s"]),
        "wait_serving": ceiling(ProviderOptions.model_fields["deploy_timeout_s"]),
        "wait_benchmark": ceiling(Plan.model_fields["max_instance_hours"]) * 3600,
    }
    for name, timeout_s in timeouts.items():
        sensor = t[f"{g}.{name}"]
        assert sensor.mode == "reschedule" and sensor.timeout == timeout_s and sensor.retries == 0
        assert sensor.poke_interval == 30  # the test process has no BAKEOFF_CLOUD_POKE_S
    chain = ["wait_slot", "provision", "wait_node", "deploy", "wait_serving", "accuracy_gate", "benchmark"]
    chain += ["wait_benchmark"]
    for before, after in itertools.pairwise(chain):
        assert f"{g}.{before}" in t[f"{g}.{after}"].upstream_task_ids, (before, after)
    assert t[f"{g}.wait_slot"].upstream_task_ids == {"targets_of"}
    assert f"{g}.wait_benchmark" in t[f"{g}.terminate"].upstream_task_ids


def test_no_task_pushes_its_keys_as_extra_xcoms(dagbag):
    """A task annotated -> dict would push every key of its result as an XCom of its own."""
    for dag_id in ("bakeoff", "bakeoff_reaper"):
        for task in dagbag.dags[dag_id].tasks:
            assert not getattr(task, "multiple_outputs", False), f"{dag_id}.{task.task_id}"


def test_failure_notifier_and_deadline_alert(dagbag, monkeypatch):
    """The run mails the alert address when it fails and when it is still going at its deadline: the
    installation's maximum run hours after it was queued, computed at parse time."""
    import bakeoff_alerts
    from airflow.sdk import DeadlineReference

    dag = dagbag.dags["bakeoff"]
    notifiers = dag.on_failure_callback if isinstance(dag.on_failure_callback, list) else [dag.on_failure_callback]
    assert [type(n) for n in notifiers] == [bakeoff_alerts.RunAlert]
    [deadline] = dag.deadline
    assert deadline.reference == DeadlineReference.DAGRUN_QUEUED_AT
    assert deadline.interval == bakeoff_alerts.deadline_interval()
    assert deadline.callback.path == "bakeoff_alerts.RunAlert" and deadline.callback.kwargs == {"reason": "deadline"}
    monkeypatch.setenv(bakeoff_alerts.HOURS_ENV, "6")
    assert bakeoff_alerts.deadline_interval().total_seconds() == 6 * 3600
    monkeypatch.setenv(bakeoff_alerts.HOURS_ENV, "soon")
    with pytest.raises(ValueError, match="BAKEOFF_MAX_RUN_HOURS"):
        bakeoff_alerts.max_run_hours()


def test_trigger_form_params(dagbag):
    params = dagbag.dags["bakeoff"].params
    for key in ("plan", "targets", "ttft_p99_ms", "tpot_p99_ms", "prices", "budget_usd", "utilisation"):
        assert key in params


def test_optional_params_are_not_marked_required_in_the_form(dagbag):
    """Airflow's trigger form stars a field whose schema type does not admit null; every field of
    this form is optional (blank: the plan's own value), and a blank one is accepted."""
    import copy

    params = copy.deepcopy(dagbag.dags["bakeoff"].params)  # resolve() keeps the value it was given
    for key in params:
        kind = params.get_param(key).schema.get("type")
        assert isinstance(kind, list) and "null" in kind, f"param {key} would be marked required: type {kind}"
    for key in params:
        assert params.get_param(key).resolve(None) is None  # blank passes the Param's own validation
    assert params.get_param("prices").resolve(["mi355x-vllm = 40.0"]) == ["mi355x-vllm = 40.0"]


def test_contract_prices_are_lines_of_the_form_checked_as_the_library_reads_them(dagbag):
    """Contract prices are a text box (an array of strings: one line per target), not a JSON editor;
    the form's pattern is the library's, so what the form lets through start_run reads."""
    import copy

    from airflow.sdk.definitions.param import ParamValidationError

    from bakeoff.plan import PRICE_LINE

    param = copy.deepcopy(dagbag.dags["bakeoff"].params.get_param("prices"))
    assert param.schema["type"] == ["null", "array"] and param.schema["items"]["type"] == "string"
    assert param.schema["items"]["pattern"] == PRICE_LINE
    for bad in (["mi355x-vllm 40"], ["mi355x-vllm = cheap"], ["mi355x-vllm = -1"], {"mi355x-vllm": 40.0}):
        with pytest.raises(ParamValidationError):
            copy.deepcopy(param).resolve(bad)


def test_plan_param_lists_the_installed_plans(dagbag):
    """The form's plan is a choice built at parse time from the plans folder, the same list the
    library accepts when the run starts."""
    from bakeoff.plan import installed_plans

    schema = dagbag.dags["bakeoff"].params.get_param("plan").schema
    assert schema["enum"] == [None, *installed_plans()] and "local-demo" in schema["enum"]


def test_plan_param_shows_each_shipped_plans_predicted_spend(dagbag):
    """Beside a shipped plan's name: its predicted spend from the precomputed index (no fit at parse time)."""
    from bakeoff.prediction import spend_index

    shown = dagbag.dags["bakeoff"].params.get_param("plan").schema["values_display"]
    labels = spend_index.labels(spend_index.SHIPPED)
    assert all(shown[p] == labels.get(p, p) for p in shown if p != "null")
    assert (
        shown["local-demo"].startswith("local-demo (predicted spend 0 USD: nothing billed")
        and "twin's error margin" in shown["local-demo"]
    )
    assert (
        shown["mi355x-vs-b200"].startswith("mi355x-vs-b200 (predicted spend ")
        and "nothing billed" not in shown["mi355x-vs-b200"]
    )


def test_every_optional_form_field_says_what_blank_means(dagbag):
    """The trigger form's help matches its widget: a blank optional field says whose value it keeps."""
    params = dagbag.dags["bakeoff"].params
    for name in ("ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "utilisation", "budget_usd", "prices", "targets"):
        text = params.get_param(name).description or ""
        assert "Blank:" in text or "blank:" in text, name
    for name in ("ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "utilisation", "budget_usd"):
        assert "the plan's value" in params.get_param(name).description, name
    targets = params.get_param("targets").description
    assert "one name a line" in targets and "[" not in targets  # the widget is a text box, one item a line
    assert "0.01 to 1" in params.get_param("utilisation").description


def test_publish_updates_reports_asset(dagbag):
    """publish emits bakeoff://reports/<plan> through an alias, so downstream DAGs can react per plan."""
    publish = dagbag.dags["bakeoff"].get_task("publish")
    assert [o.name for o in publish.outlets] == ["bakeoff-reports"]


@pytest.mark.slow
def test_parse_is_light():
    """Parsing must not import the heavy stack (pandas, GX, pyarrow, aiohttp, the cloud SDKs) or the
    library's steps: of bakeoff, only the provider registry, the interface with its tag names and the
    declared step sequence (plain data) are read at parse time."""
    registry = (
        "bakeoff",
        "bakeoff.providers",
        "bakeoff.providers.base",
        "bakeoff.providers.registry",
        "bakeoff.providers.tags",
        "bakeoff.run",
        "bakeoff.run.steps",
        "bakeoff.prediction",
        "bakeoff.prediction.spend_index",
    )
    code = (
        "import sys, runpy; runpy.run_path('dags/bakeoff_dag.py'); runpy.run_path('dags/bakeoff_reaper_dag.py');"
        "heavy = [m for m in ('pandas', 'great_expectations', 'pyarrow', 'aiohttp', 'oci') if m in sys.modules];"
        f"heavy += [m for m in sys.modules if m.split('.')[0] == 'bakeoff' and m not in {registry!r}];"
        "print('heavy:' + ','.join(heavy))"
    )
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    # the last line: Airflow may log warnings (e.g. a provider's deprecated import) before it
    heavy = out.stdout.strip().splitlines()[-1]
    assert heavy == "heavy:", f"parse imported: {heavy}"
    assert time.monotonic() - start < 60


def test_no_module_shadows_the_library():
    """Airflow puts dags/ and plugins/ on sys.path: a bakeoff.py there would hide the package."""
    for folder in ("dags", "plugins"):
        assert not (ROOT / folder / "bakeoff.py").exists()
        assert not (ROOT / folder / "bakeoff").exists()


def test_the_failure_notifier_mails_the_alert_address(dagbag, monkeypatch):
    """The DAG's failure callback sends one mail through the SMTP connection to the configured
    address; with no address configured it sends nothing and raises nothing."""
    from types import SimpleNamespace

    import bakeoff_alerts

    from tests.smtp_sink import SmtpSink

    dag = dagbag.dags["bakeoff"]
    notifiers = dag.on_failure_callback if isinstance(dag.on_failure_callback, list) else [dag.on_failure_callback]
    failed_run = {
        "dag": dag,
        "dag_run": SimpleNamespace(dag_id="bakeoff", run_id="manual__1"),
        "reason": "task_failure",
    }
    with SmtpSink() as sink:
        for key, value in sink.connection_env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv(bakeoff_alerts.ALERT_ENV, raising=False)
        for notify in notifiers:
            notify(failed_run)
        assert sink.messages == []  # no alert configured: nothing sent
        monkeypatch.setenv(bakeoff_alerts.ALERT_ENV, "oncall@example.com")
        for notify in notifiers:
            notify(failed_run)
        # the deadline callback's context: the run in its API form
        bakeoff_alerts.RunAlert(reason="deadline")({"dag_run": {"dag_id": "bakeoff", "dag_run_id": "manual__2"}})
    (to, mail), (to2, late) = sink.messages
    assert to == to2 == ["oncall@example.com"]
    body = "".join(p.get_payload(decode=True).decode() for p in mail.walk() if p.get_content_type() == "text/html")
    assert mail["Subject"] == "[bakeoff] bakeoff run manual__1 failed" and "task_failure" in body
    assert late["Subject"] == "[bakeoff] bakeoff run manual__2 is past its deadline"


def test_nothing_is_provisioned_before_the_spend_approval(dagbag):
    """approve_spend sits between the budget guard and every provisioning path, never retries (a retry
    would ask again after a Reject), and its skip (no approval needed) lets the targets through."""
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    t = {task.task_id: task for task in dagbag.dags["bakeoff"].tasks}
    gate = t["approve_spend"]
    assert isinstance(gate, ApprovalOperator) and gate.retries == 0 and gate.fail_on_reject
    assert gate.upstream_task_ids == {"start_run"}
    listed = t["targets_of"]
    assert "approve_spend" in listed.upstream_task_ids
    assert listed.trigger_rule == TriggerRule.NONE_FAILED
    assert f"{G}.provision" in listed.get_flat_relative_ids(upstream=False)
    assert "approve_spend" in t["watcher"].upstream_task_ids


def test_preflight_is_an_optional_first_step_that_can_end_the_run(dagbag):
    """The form's pre-flight switch: a short-circuit before start_run that, for "pre-flight only",
    skips every later task whatever its trigger rule."""
    dag = dagbag.dags["bakeoff"]
    task = dag.get_task("preflight")
    assert task.upstream_task_ids == {"schedule_gate"} and "start_run" in task.downstream_task_ids
    assert task.ignore_downstream_trigger_rules is True and type(task).__name__ == "_ShortCircuitDecoratedOperator"
    schema = dag.params.get_param("preflight").schema
    assert schema["enum"] == [None, "off", "check first", "pre-flight only"] and dag.params["preflight"] == "off"


def test_unpausing_starts_no_run_until_the_schedule_is_enabled(dagbag):
    """Airflow runs the schedule's latest tick at once when the DAG is unpaused (catchup=False still
    does): the short-circuit gate before everything skips that run, teardowns included, while the
    Variable bakeoff_schedule_from is unset or later; the first tick from that date on goes ahead."""
    import pendulum
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.timetables.base import TimeRestriction

    from bakeoff.run.schedule_gate import refusal

    dag = dagbag.dags["bakeoff"]
    scheduled = DagSerialization.from_dict(DagSerialization.to_dict(dag))  # what the scheduler reads
    timetable, restriction = scheduled.timetable, TimeRestriction(scheduled.start_date, None, scheduled.catchup)
    first = timetable.next_dagrun_info_v2(last_dagrun_info=None, restriction=restriction)
    assert first and first.run_after <= pendulum.now("UTC")  # due already: it would start at unpause
    later = timetable.next_dagrun_info_v2(last_dagrun_info=first, restriction=restriction)
    assert later and refusal("scheduled", first.run_after, None)
    enabled_from = later.run_after.date().isoformat()
    assert refusal("scheduled", first.run_after, enabled_from)
    assert refusal("scheduled", later.run_after, enabled_from) is None
    gate = dag.get_task("schedule_gate")
    assert type(gate).__name__ == "_ShortCircuitDecoratedOperator" and gate.ignore_downstream_trigger_rules
    assert [r.task_id for r in dag.roots] == ["schedule_gate"]
    assert gate.get_flat_relative_ids(upstream=False) == {t.task_id for t in dag.tasks} - {"schedule_gate"}


def test_the_cloud_sensors_poke_interval_comes_from_the_environment(dagbag, monkeypatch):
    """30 s unless BAKEOFF_CLOUD_POKE_S says otherwise (rehearsals on fake clouds); nonsense is refused by name."""
    dag_file = str(ROOT / "dags" / "bakeoff_dag.py")
    (module,) = {m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == dag_file}
    monkeypatch.delenv(module.CLOUD_POKE_ENV, raising=False)
    assert module.cloud_poke_s() == 30
    monkeypatch.setenv(module.CLOUD_POKE_ENV, "2")
    assert module.cloud_poke_s() == 2
    for bad in ("0", "soon", "nan", "3600"):
        monkeypatch.setenv(module.CLOUD_POKE_ENV, bad)
        with pytest.raises(ValueError, match="BAKEOFF_CLOUD_POKE_S"):
            module.cloud_poke_s()


def test_each_target_carries_its_own_sensor_pace(dagbag):
    """One sensor serves every target, so each item says how often its target is checked: a cloud node
    every 30 s (BAKEOFF_CLOUD_POKE_S), the local emulator every 2 s; the items keep the plan's order."""
    targets_of = dagbag.dags["bakeoff"].get_task("targets_of")
    run = {
        "run_dir": "r",
        "targets": ["b200-vllm", "mi355x-vllm", "h100-static"],
        "providers": {"mi355x-vllm": "local", "b200-vllm": "aws", "h100-static": "static"},
    }
    items = targets_of.python_callable(run)
    assert [(i["slug"], i["poke_s"]) for i in items] == [("b200-vllm", 30), ("mi355x-vllm", 2), ("h100-static", 2)]
    assert {i["run_dir"] for i in items} == {"r"}


def test_the_dag_run_links_to_its_report_through_an_extra_link_on_publish(dagbag):
    """Airflow's own mechanism: publish's "Report" extra link survives serialisation (what the UI reads)."""
    from airflow.serialization.serialized_objects import DagSerialization

    scheduled = DagSerialization.from_dict(DagSerialization.to_dict(dagbag.dags["bakeoff"]))
    assert scheduled.get_task("publish").extra_links == ["Report"]
    assert all(not scheduled.get_task(t).extra_links for t in ("report", "cost", "start_run"))
