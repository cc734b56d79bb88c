"""Fault injection: does any node outlive its run? Prints a table per stage x provider.

For each provider (EC2 via moto, Vultr, DigitalOcean and OCI fakes; every node an emulator booted
from its user-data) and each failure -- at launch, capacity refused everywhere, provisioning
failing after the node exists, ready timeout, deploy crash, mid-benchmark exception, report
failure, and the worker killed with SIGKILL mid-provision -- the pipeline's own steps run in the
order and under the trigger rules the bakeoff DAG gives them:

  provision (setup) -> deploy -> accuracy gate -> benchmark; terminate (teardown) only if the
  setup succeeded; then the all_done sweep; validate/cost/report; the watcher marks the run failed.

The SIGKILL row kills the process running ``provision`` once its node exists; Airflow is gone with
it, so neither the teardown nor the sweep run and the run is never marked ended: the hourly reaper
finds the node by its expiry tag (its pass is timed after max_instance_hours). Nodes are counted
from the fake clouds' own state, not through the providers. Then the budget guard is shown
refusing an over-cap plan before any cloud API call.

The Airflow-dies rows (one per cloud, plus OCI in a second compartment and region) SIGKILL the
scheduler and the worker right after the node exists: no teardown, no sweep, no Airflow reaper.
What is left is the node's own kill switch and the independent reaper (``reaper.reap_loop``, what
``bakeoff reap --loop`` runs, every REAPER_INTERVAL_S). The sandbox clock then runs forward to the
node's expiry, and the fakes' meters say how many node-minutes each cloud billed after the kill:
at most the kill-switch horizon where the node ends its own billing (EC2 terminate-on-shutdown,
OCI self-delete), at most the horizon plus one reaper interval where a stopped node bills on
(Vultr, DigitalOcean), and no node left at the end.

The Vultr and DigitalOcean fakes hold every request and answer to the clouds' published OpenAPI
definitions (``bakeoff_sandbox/spec_check``); the run ends by counting requests they refused and
answers that departed from a definition (goal: none). Two rows per cloud follow: a 429 storm during
teardown (every request rate-limited for STORM_S; DigitalOcean says when its window resets, Vultr
does not) must still end with the node deleted, and a re-provision after a clear (the target's node
terminated, then provision run again for the same run, as a cleared task is) must make a fresh node.

    .venv/bin/python benchmarks/fault_injection.py [--only airflow-dies,storm,reprovision] [--clouds vultr,digitalocean]
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_OWN_DATA = None if os.environ.get("BAKEOFF_DATA") else tempfile.mkdtemp(prefix="bakeoff-faults-")
os.environ.setdefault("BAKEOFF_DATA", _OWN_DATA or "")

from bakeoff.cleanup import reaper  # noqa: E402
from bakeoff.core.provider_facts import PROVISIONING  # noqa: E402
from bakeoff.plan import load_plan  # noqa: E402
from bakeoff.run import pipeline, provisioning, teardown_steps, worker_time  # noqa: E402
from bakeoff.spend import budget  # noqa: E402
from bakeoff_sandbox import Sandbox  # noqa: E402
from bakeoff_sandbox import oci as fake_oci  # noqa: E402

STAGES = [
    ("launch", "launch"),
    ("capacity error", None),
    ("after create", "after_create"),
    ("ready timeout", "ready_timeout"),
    ("deploy crash", "deploy"),
    ("mid-benchmark exception", "benchmark"),
    ("report failure", "report"),
    ("worker SIGKILL mid-run", None),
]
PROVIDERS = list(PROVISIONING)  # every cloud bakeoff provisions nodes on
REAPER_INTERVAL_S = 300  # the independent reaper's interval (the compose service's and the cron line's)
STORM_S = 8.0  # how long every API request is answered 429 in the storm rows
REST_CLOUDS = ("vultr", "digitalocean")  # the fakes that rate-limit (EC2 is moto, OCI its own fake)
SECTIONS = ("stages", "airflow-dies", "storm", "reprovision")
# how long an Airflow-dies row waits for the worker's node: a fresh process imports the library and the
# cloud SDKs (OCI's alone is seconds), then provisions; on a loaded 2-core machine the OCI worker took
# 163 s, beyond the first 120 s wait, and the row showed 0 nodes with no reason given
NODE_WAIT_S = 600
OCI_ELSEWHERE = "oci (2nd compartment + region)"


def plan_file(provider: str, fault: str | None, workdir: Path, elsewhere: bool = False) -> Path:
    """A one-target plan per provider, derived from the sandbox plan (small workload: the point is teardown)."""
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    by_provider = {t["provider"]: t for t in raw["targets"]}
    by_provider["oci"] = load_plan("mi355x-vs-b200-oci-sandbox").model_dump(mode="json")["targets"][1]
    if provider == "digitalocean":
        t = dict(
            by_provider["vultr"],
            name="mi300x-vllm",
            provider="digitalocean",
            instance_type="gpu-mi300x8-1536gb",
            provider_options={**by_provider["vultr"]["provider_options"], "regions": ["atl1", "nyc2"]},
        )
    else:
        t = by_provider[provider]
    t = json.loads(json.dumps(t))
    t["provider_options"]["inject_fault"] = fault
    if elsewhere:  # where the connection's compartment and region do not look
        t["provider_options"].update(
            compartment_id=fake_oci.COMPARTMENT_2,
            subnet_ocid=fake_oci.SUBNET_2,
            regions=[fake_oci.SECOND_REGION],
            availability_domains=fake_oci.ADS_BY_REGION[fake_oci.SECOND_REGION][:2],
        )
    raw.update(name=f"faults-{provider}", targets=[t])
    raw["workloads"][0].update(concurrency=[4], requests_per_point=8, warmup_requests=0)
    raw["quality"]["accuracy"]["eval_size"] = 16
    path = workdir / f"faults-{provider}-{fault or 'none'}{'-elsewhere' if elsewhere else ''}.yaml"
    path.write_text(json.dumps(raw))
    return path


def run_dag_like(run_dir: str, slug: str) -> None:
    """The mapped group with Airflow's setup/teardown rule: teardown runs only after a successful setup."""
    try:
        inst = provisioning.provision(run_dir, slug)
    except Exception as e:  # noqa: BLE001 - a failed setup is a row outcome, not a crash of the script
        logging.info("provision failed: %s", e)
        return
    try:
        ready = worker_time.until_done(provisioning.node_ready, run_dir, slug, inst)
        pipeline.deploy(run_dir, slug, ready)
        ep = worker_time.until_done(pipeline.serving_ready, run_dir, slug, ready)
        pipeline.accuracy_gate(run_dir, slug, ep)
        worker_time.until_done(pipeline.benchmark_done, run_dir, slug, ep, pipeline.benchmark(run_dir, slug, ep))
    except Exception as e:  # noqa: BLE001
        logging.info("step failed: %s", e)
    finally:
        teardown_steps.terminate(run_dir, slug, inst)


def sigkill_provision(sb: Sandbox, run_dir: str, slug: str, provider: str, before: int) -> None:
    code = (
        # sb.env() carries the sandbox's credentials: the step's default resolver reads them
        f"from bakeoff.run import provisioning; provisioning.provision({run_dir!r}, {slug!r})"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, **sb.env()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + NODE_WAIT_S  # as in the Airflow-dies rows: a fresh process is slow to start
    while len(sb.live()[provider]) <= before and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def one_row(sb: Sandbox, provider: str, stage: str, fault: str | None, workdir: Path) -> dict:
    plan = load_plan(plan_file(provider, fault, workdir))
    t = plan.targets[0]
    # where capacity is refused: regions, or OCI's availability domains within its subnet's region
    regions = list(t.provider_options.availability_domains if provider == "oci" else t.provider_options.regions)
    sb.deny_capacity(provider, regions if stage == "capacity error" else [])
    run_id = f"faults__{provider}__{fault or stage.replace(' ', '-')}__{time.time_ns()}"
    run = pipeline.start_run(str(plan_file(provider, fault, workdir)), run_id)
    before = len(sb.live()[provider])
    killed = stage.startswith("worker SIGKILL")
    if killed:
        sigkill_provision(sb, run["run_dir"], t.slug, provider, before)
    else:
        run_dag_like(run["run_dir"], t.slug)
    after_teardown = len(sb.live()[provider]) - before
    if not killed:
        teardown_steps.sweep(run["run_dir"])
    after_sweep = len(sb.live()[provider]) - before
    if not killed:
        for step in (pipeline.validate, pipeline.cost, pipeline.report):
            try:
                step(run["run_dir"])
            except Exception as e:  # noqa: BLE001
                logging.info("%s failed: %s", step.__name__, e)
    now = time.time() + (plan.max_instance_hours * 3600 + 60 if killed else 0)
    # Airflow's answer for this run: failed once its steps are done (the watcher fails the DAG run);
    # a worker killed mid-run leaves it running, so only the expiry tag frees its node
    ended = {} if killed else {run_id: "failed"}
    reaped = reaper.reap(
        now=now,
        provider_names=[provider],
        credentials_fn=sb.credentials,
        run_state=lambda plan_name, rid: ended.get(rid, "running"),
    )
    after_reaper = len(sb.live()[provider]) - before
    sb.deny_capacity(provider, [])
    return {
        "stage": stage,
        "provider": provider,
        "teardown": after_teardown,
        "sweep": after_sweep,
        "reaper": after_reaper,
        "reaped": len(reaped["terminated"]),
        "reaper_at": "expiry" if killed else "now",
    }


def _airflow_process(sb: Sandbox, code: str, log: Path | None = None) -> subprocess.Popen:
    """A stand-in for an Airflow process; its output goes to ``log`` (read back when no node appeared)."""
    out = log.open("wb") if log else subprocess.DEVNULL
    try:
        return subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **sb.env()}, stdout=out, stderr=out)
    finally:
        if log:
            out.close()


def _why_no_node(worker: subprocess.Popen, waited_s: float, log: Path) -> str:
    """Why the worker made no node: it exited (with the last line it printed), or it was still
    starting when the wait ran out (the import of the library and the cloud SDKs, on a loaded machine)."""
    tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:]
    if worker.returncode is not None:
        return f"worker exited {worker.returncode} before creating a node: {(tail or ['no output'])[0][:160]}"
    return f"no node within {waited_s:.0f} s (worker still starting: raise NODE_WAIT_S on a loaded machine)"


def airflow_dies(sb: Sandbox, provider: str, workdir: Path, elsewhere: bool = False) -> dict:
    """The worker runs the target's whole task group and the scheduler its hourly reaper; both are
    SIGKILLed once the node exists. Then only the node and the independent reaper act, on the sandbox clock."""
    cloud = "oci" if elsewhere else provider
    path = plan_file(cloud, None, workdir, elsewhere)
    plan = load_plan(path)
    slug = plan.targets[0].slug
    run = pipeline.start_run(str(path), f"faults__{provider}__airflow-dies__{time.time_ns()}")
    before = set(sb.live()[cloud])
    # credentials: the sandbox's, from its env
    setup = "from bakeoff.run import teardown_steps; from bakeoff.cleanup import reaper"
    log = workdir / f"worker-{cloud}-{'elsewhere' if elsewhere else 'home'}.log"
    worker = _airflow_process(
        sb,
        f"{setup}; import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"from fault_injection import run_dag_like; run_dag_like({run['run_dir']!r}, {slug!r}); "
        f"teardown_steps.sweep({run['run_dir']!r})",
        log,
    )
    scheduler = _airflow_process(
        sb,
        f"{setup}; import time\nwhile True:\n    time.sleep(3600); reaper.reap()",
    )
    waited = time.monotonic()
    deadline = waited + NODE_WAIT_S
    while not set(sb.live()[cloud]) - before and time.monotonic() < deadline and worker.poll() is None:
        time.sleep(0.05)
    waited = time.monotonic() - waited
    for proc in (scheduler, worker):
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    killed_at = sb.clock.now()
    nodes = sorted(set(sb.live()[cloud]) - before)
    horizon_s = max((sb.backing.deadline(cloud, n) or killed_at) - killed_at for n in nodes) if nodes else 0.0

    def wait(seconds: float) -> bool:  # the loop's sleep is the sandbox clock running forward
        sb.clock.advance(seconds)
        return not (set(sb.live()[cloud]) - before)

    passes = reaper.reap_loop(
        REAPER_INTERVAL_S,
        provider_names=[cloud],
        credentials_fn=sb.credentials,
        wait=wait,
        now_fn=sb.clock.now,
        max_passes=int(plan.max_instance_hours * 3600 // REAPER_INTERVAL_S) + 3,
    )
    billed = sb.billed_minutes(cloud, killed_at)
    left = len(set(sb.live()[cloud]) - before)
    horizon = horizon_s / 60
    bound = horizon + (0 if cloud in ("aws", "oci") else REAPER_INTERVAL_S / 60)
    return {
        "provider": OCI_ELSEWHERE if elsewhere else provider,
        "why": "" if nodes else _why_no_node(worker, waited, log),
        "to_node_s": waited,
        "nodes": len(nodes),
        "horizon": horizon,
        "billed": billed,
        "past": max(0.0, billed - horizon * len(nodes)),
        "bound": bound * max(1, len(nodes)),
        "left": left,
        "passes": passes,
        "ok": left == 0 and len(nodes) > 0 and billed <= bound * len(nodes) + 0.5,
    }


def storm_during_teardown(sb: Sandbox, provider: str, workdir: Path) -> dict:
    """The node exists; then every API request is a 429 for STORM_S while the teardown runs."""
    path = plan_file(provider, None, workdir)
    slug = load_plan(path).targets[0].slug
    run = pipeline.start_run(str(path), f"faults__{provider}__storm__{time.time_ns()}")
    before = set(sb.live()[provider])
    inst = provisioning.provision(run["run_dir"], slug)
    cloud = sb.fakes[provider]
    calls = cloud.requests
    cloud.rate_limited_until = time.time() + STORM_S
    start = time.monotonic()
    try:
        teardown_steps.terminate(run["run_dir"], slug, inst)
        outcome = "deleted"
    except Exception as e:  # noqa: BLE001 - a teardown that gave up is the row's outcome
        outcome = f"gave up: {type(e).__name__}"
    took = time.monotonic() - start
    cloud.rate_limited_until = 0.0
    left = len(set(sb.live()[provider]) - before)
    return {"provider": provider, "outcome": outcome, "took": took, "calls": cloud.requests - calls, "left": left}


def reprovision_after_clear(sb: Sandbox, provider: str, workdir: Path) -> dict:
    """Provision, terminate, provision again for the same run and target (a cleared task group)."""
    path = plan_file(provider, None, workdir)
    slug = load_plan(path).targets[0].slug
    run = pipeline.start_run(str(path), f"faults__{provider}__reprovision__{time.time_ns()}")
    before = set(sb.live()[provider])
    first = provisioning.provision(run["run_dir"], slug)
    teardown_steps.terminate(run["run_dir"], slug, first)
    try:
        second = provisioning.provision(run["run_dir"], slug)
        live = set(sb.live()[provider]) - before
        fresh = second["id"] != first["id"] and len(live) == 1
        outcome = "fresh node" if fresh else f"reused {second['id']} (live: {len(live)})"
        teardown_steps.terminate(run["run_dir"], slug, second)
    except Exception as e:  # noqa: BLE001 - a refused re-provision is the row's outcome
        fresh, outcome = False, f"failed: {type(e).__name__}: {str(e)[:80]}"
    left = len(set(sb.live()[provider]) - before)
    return {"provider": provider, "outcome": outcome, "ok": fresh and left == 0, "left": left}


def spec_counts(sb: Sandbox) -> dict[str, tuple[int, int, int]]:
    """Per spec-held fake: (requests served, requests the definition refused, answers that departed from it)."""
    return {c: (sb.fakes[c].requests, len(sb.fakes[c].refused), len(sb.fakes[c].answer_problems)) for c in REST_CLOUDS}


def _add_counts(total: dict[str, list[int]], counts: dict[str, tuple[int, int, int]]) -> None:
    for c, v in counts.items():
        total.setdefault(c, [0, 0, 0])
        total[c] = [a + b for a, b in zip(total[c], v, strict=True)]


def budget_guard(sb: Sandbox, workdir: Path) -> str:
    raw = load_plan("mi355x-vs-b200").model_dump(mode="json")
    raw["budget_usd"] = 100.0
    path = workdir / "over-cap.yaml"
    path.write_text(json.dumps(raw))
    calls = sb.api_calls()
    try:
        pipeline.start_run(str(path), f"overcap__{time.time_ns()}")
        verdict = "NOT refused"
    except budget.BudgetExceeded as e:
        verdict = "refused: " + str(e).splitlines()[0].rstrip(":")
    return f"{verdict}; cloud API calls made: {sb.api_calls() - calls}"


def main(argv: list[str] | None = None) -> int:
    import argparse  # noqa: PLC0415

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {', '.join(SECTIONS)}")
    ap.add_argument("--clouds", default=",".join(PROVIDERS), help="comma-separated clouds (default: every one)")
    args = ap.parse_args(argv)
    only, clouds = set(args.only.split(",")), [c for c in PROVIDERS if c in args.clouds.split(",")]
    if only - set(SECTIONS):
        ap.error(f"--only: unknown {', '.join(sorted(only - set(SECTIONS)))}; choose from {', '.join(SECTIONS)}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("werkzeug", "httpx", "bakeoff"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    t0 = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="bakeoff-faults-plans-"))
    rows: list[dict] = []
    storms: list[dict] = []
    again: list[dict] = []
    spec: dict[str, list[int]] = {}
    guard, leftover, firewalls, nsgs = "not run", {}, 0, 0
    with Sandbox(boot_s=0.2) as sb, sb.exported():  # every step's default credentials: the sandbox's clouds
        for stage, fault in STAGES if "stages" in only else []:
            for provider in clouds:
                rows.append(one_row(sb, provider, stage, fault, workdir))
                r = rows[-1]
                print(
                    f"  {r['stage']:<24} {r['provider']:<13} teardown {r['teardown']}  sweep {r['sweep']}  "
                    f"reaper {r['reaper']}",
                    file=sys.stderr,
                    flush=True,
                )
        for provider in [c for c in REST_CLOUDS if c in clouds] if "storm" in only else []:
            storms.append(storm_during_teardown(sb, provider, workdir))
            print(f"  429 storm in teardown    {provider:<13} {storms[-1]['outcome']}", file=sys.stderr, flush=True)
        for provider in clouds if "reprovision" in only else []:
            again.append(reprovision_after_clear(sb, provider, workdir))
            print(f"  re-provision after clear {provider:<13} {again[-1]['outcome']}", file=sys.stderr, flush=True)
        if "stages" in only:
            guard = budget_guard(sb, workdir)
        leftover = sb.live()
        firewalls = len(sb.fakes["digitalocean"].firewalls)
        nsgs = len(sb.fakes["oci"].nsgs)
        _add_counts(spec, spec_counts(sb))
    dies = []
    rows_dies = [(p, False) for p in clouds] + ([("oci", True)] if "oci" in clouds else [])
    for provider, elsewhere in rows_dies if "airflow-dies" in only else []:
        # a fresh sandbox per row: its clock starts at the real time the run's expiry tag is counted from
        with Sandbox(boot_s=0.2) as sb, sb.exported():
            dies.append(airflow_dies(sb, provider, workdir, elsewhere))
            _add_counts(spec, spec_counts(sb))
        d = dies[-1]
        print(
            f"  Airflow dies             {d['provider']:<13} billed {d['billed']:.1f} node-min after the kill, "
            f"left {d['left']}{'; ' + d['why'] if d['why'] else ''}",
            file=sys.stderr,
            flush=True,
        )
    wall = time.perf_counter() - t0
    shutil.rmtree(workdir, ignore_errors=True)
    if _OWN_DATA:
        shutil.rmtree(_OWN_DATA, ignore_errors=True)
    ok = True
    if rows:
        print(
            "\nInstances left running "
            "(sandbox: EC2 = moto server, Vultr/DigitalOcean/OCI = local fakes; nodes are emulators)\n"
        )
        print("| stage | provider | after teardown | after all_done sweep | after one reaper pass | reaper pass at |")
        print("| --- | --- | ---: | ---: | ---: | --- |")
        for r in rows:
            cells = [r["stage"], r["provider"], r["teardown"], r["sweep"], r["reaper"], r["reaper_at"]]
            print("| " + " | ".join(str(c) for c in cells) + " |")
        ok_reaper = all(r["reaper"] == 0 for r in rows)
        ok_sweep = all(r["sweep"] == 0 for r in rows if not r["stage"].startswith("worker SIGKILL"))
        ok = ok and ok_reaper and ok_sweep
        print(
            f"\nzero after the reaper in every row: {ok_reaper}; "
            f"zero after the sweep in every row but SIGKILL: {ok_sweep}"
        )
    if dies:
        print(
            f"\nAirflow dies (scheduler and worker SIGKILLed once the node exists; independent reaper every "
            f"{REAPER_INTERVAL_S // 60} min; sandbox clock run to the node's expiry)\n"
        )
        print(
            "| cloud | nodes | s to the node | kill switch | kill-switch horizon (min) | billed node-min after "
            "Airflow dies | billed past the horizon | goal: billed at most | nodes left at the end | goal met |"
        )
        print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |")
        switch = {
            "aws": "power-off = terminate",
            "oci": "self-delete (instance principal)",
            "vultr": "power-off; reaper at the expiry tag (= kill-switch time)",
            "digitalocean": "power-off; reaper sees it off",
        }
        for d in dies:
            cloud = "oci" if d["provider"].startswith("oci") else d["provider"]
            if not d["nodes"]:  # not measured: say why instead of a row of zeros
                cells = [d["provider"], 0, f"{d['to_node_s']:.0f}", d["why"], "–", "–", "–", "–", d["left"], False]
                print("| " + " | ".join(str(c) for c in cells) + " |")
                continue
            print(
                f"| {d['provider']} | {d['nodes']} | {d['to_node_s']:.0f} | {switch[cloud]} | {d['horizon']:.1f} | "
                f"{d['billed']:.1f} | {d['past']:.1f} | {d['bound']:.1f} | {d['left']} | {d['ok']} |"
            )
        ok_dies = all(d["ok"] for d in dies)
        ok = ok and ok_dies
        print(
            f"goal: billed after the kill at most the horizon where the node ends its own billing, the horizon "
            f"plus one reaper interval where a stopped node bills on; every row met it: {ok_dies}"
        )
    if storms:
        print(f"\n429 storm during teardown (every request answered 429 for {STORM_S:.0f} s)\n")
        print("| cloud | teardown | seconds | API requests during the teardown | nodes left |")
        print("| --- | --- | ---: | ---: | ---: |")
        for st in storms:
            print(f"| {st['provider']} | {st['outcome']} | {st['took']:.1f} | {st['calls']} | {st['left']} |")
        ok = ok and all(st["outcome"] == "deleted" and st["left"] == 0 for st in storms)
    if again:
        print("\nRe-provision after clear (terminate, then provision again for the same run and target)\n")
        print("| cloud | second provision | nodes left after its teardown | goal met |")
        print("| --- | --- | ---: | --- |")
        for a in again:
            print(f"| {a['provider']} | {a['outcome']} | {a['left']} | {a['ok']} |")
        ok = ok and all(a["ok"] for a in again)
    print("\nRequests and answers against the published API definitions\n")
    print("| fake | requests served | refused by the definition | answers departing from it |")
    print("| --- | ---: | ---: | ---: |")
    for c, (n, refused, bad) in spec.items():
        print(f"| {c} | {n} | {refused} | {bad} |")
    ok = ok and all(v[1] == 0 and v[2] == 0 for v in spec.values())
    print(f"\nbudget guard on an over-cap mi355x-vs-b200 (cap 100 USD): {guard}")
    print(
        "nodes left in the sandbox at the end: "
        f"{sum(len(v) for v in leftover.values()) + sum(d['left'] for d in dies)}; "
        f"DigitalOcean cloud firewalls left: {firewalls}; OCI security groups left: {nsgs}; wall time {wall:.1f} s"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
