"""Rack scale on paper: single-node vs disaggregated vs NVL72, from the vendored multi-node recipes.

    python benchmarks/rack_scale.py [--model deepseek-r1] [--precision nvfp4]

For every multi-node recipe of the model (and precision, if given) whose GPU is in the hardware
catalog, each arm's footprint (GPUs, nodes, racks, where the KV moves) and the emulator's paper model
of it (serving.emulator.disagg) beside one aggregated 8-GPU server of the same GPU at the same
concurrencies: output tokens/s per GPU, tokens/s per user and TTFT. Every figure is EMULATED: a
roofline with the emulator's default efficiencies, not a measurement; it shows the shape (where a
disaggregated pool wins, where KV over the NICs costs), not the level.

    python benchmarks/rack_scale.py --provision

Part (a), in the sandbox (moto EC2 with emulator-backed nodes, its clock and billing meter): a 4-node
disaggregated B200 target and an NVL72-shaped GB200 target (6 trays of a gb200-nvl72 UltraServer, 2 of
them idle) each run through the pipeline's own steps, as the DAG runs them: provision (all or nothing,
one deadline, each node checked to run the emulator, the router in front), node readiness, deploy,
serving readiness of every role, a short closed-loop benchmark through the router (client on this
machine), terminate and sweep; then each again with its last node's create failing (inject_fault:
node_create). Prints when each step finished, the provisioning timeline per node, the point's figures
(EMULATED) with its rack-scale cost, each role's instance and image, nodes left on the cloud, and
node-minutes billed while up and after teardown and the deadline. Part (b), the client fleet across
processes, is benchmarks/client_fleet.py.

    python benchmarks/rack_scale.py --recipes

The issue's four recipe families as targets (``recipe:`` + ``recipe_arm:``, plan.multinode), each at its
smallest arm, on the local provider (emulator processes, EMULATED): the GB200 and GB300 Dynamo SGLang
recipes (NVL72 trays) and the MI355X SGLang PD and ATOM recipes (8-GPU nodes). Each renders, provisions
all or nothing, serves a short closed loop through the router, is costed at rack scale, and is released;
prints the rendered cluster, the timeline per node and nodes left.

    python benchmarks/rack_scale.py --recipes --sandbox

The same four recipe arms on the sandbox's clouds through the pipeline's steps (as ``--provision``): the
GB200 Dynamo arm on EC2 (p6e-gb200 UltraServer trays), the GB300 Dynamo arm and both MI355X arms on OCI
(BM.GPU.GB300.4 trays, BM.GPU.MI355X.8 nodes): the clouds whose catalogued cluster offers sell each GPU
(catalog clusters.yaml). Each cloud's sandbox credentials claim emulated nodes and each node's /version
says so. Prints the per-node timeline, the point (EMULATED), cost, each role's instance and image, nodes
left and node-minutes billed after teardown.

    python benchmarks/rack_scale.py --published

Part (c): the emulator's disaggregated curve (serving.emulator.disagg, EMULATED) for each recipe arm whose
InferenceX measurements are public (benchmarks/data/inferencex_disagg_published.yaml, with its source,
commit and dates) at the published sequence lengths and concurrencies, beside the published points:
total tokens/s per GPU and tokens/s per user, their ratios, and the shape (each curve normalised to its
first point). The other rack-scale recipes (GB300 Dynamo, MI355X SGLang PD and ATOM) have no stored
published points: listed as such, shape only.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import sys
import time
import uuid
from pathlib import Path

import httpx
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from bakeoff import catalog, cost
from bakeoff.clusters import cluster
from bakeoff.plan import Target, multinode
from bakeoff.serving.emulator import disagg
from bakeoff_sandbox import Sandbox


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-r1")
    ap.add_argument("--precision", default=None)
    ap.add_argument("--provision", action="store_true", help="part (a): provision, serve, tear down in the sandbox")
    ap.add_argument("--published", action="store_true", help="part (c): the emulated curve against InferenceX's")
    ap.add_argument("--recipes", action="store_true", help="the four recipe families as targets, on the local provider")
    ap.add_argument("--sandbox", action="store_true", help="with --recipes: on the sandbox's clouds, via the pipeline")
    args = ap.parse_args(argv)
    if args.sandbox and not args.recipes:
        ap.error("--sandbox: runs the recipe arms on the sandbox's clouds; give it with --recipes")
    if args.provision:
        return provision_in_sandbox()
    if args.published:
        return against_published()
    if args.recipes:
        return recipes_in_sandbox() if args.sandbox else recipes_on_local()
    chosen = [
        r
        for r in multinode.multinode_recipes().values()
        if r.model == args.model and (args.precision is None or r.precision == args.precision)
    ]
    skipped = sorted({r.gpu for r in chosen if r.gpu not in catalog.gpus()})
    print(f"EMULATED. {len(chosen)} multi-node recipes of {args.model}; GPUs without a catalog entry: {skipped or '-'}")
    header = f"{'recipe':42} {'arm':>3} {'shape':14} {'conc':>5} {'gpus':>5} {'nodes':>5} {'racks':>5} "
    header += f"{'tok/s/gpu':>10} {'tok/s/user':>10} {'ttft s':>7} {'kv ms':>6} bound"
    print(header)
    for r in chosen:
        if r.gpu not in catalog.gpus():
            continue
        for i, arm in enumerate(r.arms):
            fp = r.footprint(arm)
            for p in disagg.disaggregated_curve(r, arm) + disagg.single_node_curve(r, arm):
                nodes, racks = (fp.nodes, fp.racks or "-") if p.shape == "disaggregated" else (1, "-")
                print(
                    f"{r.name:42} {i:>3} {p.shape:14} {p.concurrency:>5} {p.gpus:>5} {nodes:>5} {racks!s:>5} "
                    f"{p.output_tps_per_gpu:>10,.0f} {p.tps_per_user:>10,.1f} {p.ttft_s:>7.3f} "
                    f"{p.kv_transfer_s * 1e3:>6.2f} {p.bound}"
                )
    return 0


# --- part (a): provision, serve and tear down in the sandbox -------------------------------------

KEY = "bk-" + "7" * 40
ISL, OSL, CONCURRENCY, REQUESTS = 512, 64, 8, 32


def _targets() -> list[dict]:
    """The two part (a) targets as plan entries (the pipeline reads a plan file)."""
    common = {
        "provider": "aws",
        "model": "llama-3.1-8b",
        "quantization": "fp8",
        "emulator": {"time_scale": 0.2},
        "provider_options": {"regions": ["us-east-1"], "ingress_cidr": "127.0.0.1/32", "client_mode": "remote"},
    }
    disagg = {
        "name": "b200 4-node disagg",
        "instance_type": "p6-b200.48xlarge",
        "cluster": {
            "nodes": 4,
            "prefill": {"workers": 2, "tp": 8},
            "decode": {"workers": 2, "tp": 8},
            "deadline_s": 120,
        },
        **common,
    }
    # p6e-gb200 is sold only as UltraServer Capacity Blocks (no list price in the catalog): priced here at
    # the catalog's TCO neocloud tier for GB200 (InferenceX-app constants.ts, 2026-04-30), per GPU-hour
    nvl72 = {
        "name": "gb200 nvl72-shaped",
        "instance_type": "p6e-gb200.36xlarge",
        "cluster": {
            "rack": "gb200-nvl72",
            "nodes": 6,
            "prefill": {"workers": 2, "tp": 4},
            "decode": {"workers": 2, "tp": 4},
            "deadline_s": 120,
        },
        "price": {
            "usd_per_gpu_hour": 2.75,
            "market": "capacity_block",
            "source": "catalog TCO tier, neocloud, 2026-04-30",
        },
        **common,
    }
    return [disagg, nvl72]


def _closed_loop(base_url: str, model: str) -> dict[str, float]:
    """CONCURRENCY users, REQUESTS streamed completions through the router: mean TTFT, output tokens/s."""
    body = {"model": model, "prompt": " ".join(["token"] * ISL), "max_tokens": OSL, "ignore_eos": True, "stream": True}
    headers = {"Authorization": f"Bearer {KEY}"}

    def one(_: int) -> tuple[float, int]:
        t0 = time.monotonic()
        ttft, chunks = None, 0
        with httpx.stream("POST", f"{base_url}/v1/completions", json=body, headers=headers, timeout=120) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    ttft = ttft if ttft is not None else time.monotonic() - t0
                    chunks += 1
        return ttft or float("nan"), chunks

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as ex:
        done = list(ex.map(one, range(REQUESTS)))
    wall = time.monotonic() - t0
    return {"ttft_s": sum(d[0] for d in done) / len(done), "output_tps": REQUESTS * OSL / wall, "wall_s": wall}


def _plan_file(root: Path, target: dict, fault: str | None, max_hours: float = 1) -> Path:
    """A one-target plan: the sandbox plan's budget and limits, one short closed-loop point, no gate
    (``max_hours``: a 671B recipe's weights take longer than an hour to load by the budget's estimate)."""
    t = {**target, "provider_options": {**target["provider_options"], "inject_fault": fault}}
    raw = {
        "name": "rack-scale-sandbox",
        "budget_usd": 1000,
        "max_instance_hours": max_hours,
        "targets": [t],
        "workloads": [
            {
                "name": f"isl{ISL}-osl{OSL}",
                "input_len": ISL,
                "output_len": OSL,
                "concurrency": [CONCURRENCY],
                "requests_per_point": REQUESTS,
                "warmup_requests": 2,
            }
        ],
        "slo": {"ttft_p99_ms": 5000, "tpot_p99_ms": 500},
        "quality": {"accuracy": {"enabled": False}},
    }
    path = root / f"plan-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _serve_in_sandbox(path: Path) -> tuple[cluster.ClusterResult, dict | None, list[str]]:
    """One target through the pipeline's steps, as the DAG runs them: provision (all or nothing), node
    readiness, deploy, serving readiness of every role, a short benchmark through the router, terminate
    and sweep. The cluster's timeline, the measured point (None when provisioning failed) and the
    lines saying when each step finished (seconds from the provision call)."""
    from bakeoff.run import pipeline, provisioning, step_context, teardown_steps, worker_time  # noqa: PLC0415 - the pipeline's steps only for part (a)

    run = pipeline.start_run(str(path), f"manual__rack_scale_{uuid.uuid4().hex[:8]}")
    rdir, slug = run["run_dir"], run["targets"][0]
    t0, steps, point = time.monotonic(), [], None
    launched = None
    try:
        launched = provisioning.provision(rdir, slug)
        steps.append(f"provisioned {time.monotonic() - t0:.2f}")
        inst = worker_time.until_done(provisioning.node_ready, rdir, slug, launched, poll_s=0.2)
        pipeline.deploy(rdir, slug, inst)
        ep = worker_time.until_done(pipeline.serving_ready, rdir, slug, inst, poll_s=0.2)
        steps.append(f"every role serving {time.monotonic() - t0:.2f}")
        started = pipeline.benchmark(rdir, slug, ep)
        worker_time.until_done(pipeline.benchmark_done, rdir, slug, ep, started, poll_s=0.2)
        steps.append(f"benchmarked {time.monotonic() - t0:.2f}")
        tdir = Path(rdir) / f"target={slug}"
        point = pd.read_parquet(tdir / "points").iloc[0].to_dict()
        doc = json.loads((tdir / "cluster.json").read_text())
        res = cluster.ClusterResult(slug, [cluster.ClusterNode(**n) for n in doc["nodes"]], doc["deadline_s"])
        res.sites = doc["sites"]
        point["roles"] = json.loads((tdir / "deploy.json").read_text())["roles"]
    except cluster.ClusterFailed as e:
        res = e.result
        why = str(e).split("; released")[0]
        steps.append(f"provision failed {time.monotonic() - t0:.2f} ({why}), released {len(res.released)} node(s)")
    finally:
        gone = set(teardown_steps.terminate(rdir, slug, launched).get("terminated") or [])
        teardown_steps.sweep(rdir)
        steps.append(f"terminated and swept {time.monotonic() - t0:.2f}")
    for n in res.nodes:  # teardown's release, on the provision call's clock (a failed cluster set its own)
        if n.released_s is None and n.instance_id in gone:
            n.released_s = time.monotonic() - t0
    point = {**point, "target": step_context.run_plan(rdir).target(slug)} if point else None
    return res, point, steps


def provision_in_sandbox() -> int:
    import os  # noqa: PLC0415 - the results folder, for this run only
    import tempfile  # noqa: PLC0415

    failures = 0
    with tempfile.TemporaryDirectory(prefix="rack-scale-sandbox-") as tmp, Sandbox(boot_s=0.2) as sb, sb.exported():
        os.environ["BAKEOFF_DATA"] = str(Path(tmp) / "data")
        for target in _targets():
            c = target["cluster"]
            shape = f"{c.get('rack') + ' rack, ' if c.get('rack') else ''}{c['nodes']} x {target['instance_type']}"
            print(f"\n== {target['name']} ({shape}) EMULATED")
            for fault in (None, "node_create"):
                began = sb.clock.now()
                res, point, steps = _serve_in_sandbox(_plan_file(Path(tmp), target, fault))
                print(
                    f"-- {'create fault on the last node' if fault else 'all nodes'}; steps (s from the provision "
                    "call): " + "; ".join(steps)
                )
                failures += _print_outcome(sb, "aws", began, res, point) or (fault is None and point is None)
    return 1 if failures else 0


def _print_outcome(sb: Sandbox, cloud: str, began: float, res: cluster.ClusterResult, point: dict | None) -> bool:
    """The timeline per node, the point (EMULATED) with its rack-scale cost, each role's instance and image,
    then nodes left on the cloud and node-minutes billed (sandbox meter) past the deadline. True when a
    node was left or billed after teardown."""
    print("\n".join("  " + row for row in res.timeline()))
    if point:
        t = point["target"]
        rs = cost.rack_scale(t, point["output_tps"])
        print(
            f"  point (EMULATED, time_scale {t.emulator.time_scale}): conc {point['concurrency']}, "
            f"{point['completed']} x ({ISL} in, {OSL} out), {point['failed']} failed: TTFT p50 "
            f"{point['ttft_ms_p50']:.0f} ms p99 {point['ttft_ms_p99']:.0f} ms, TPOT p50 "
            f"{point['tpot_ms_p50']:.1f} ms; {point['output_tps']:.0f} out tok/s ({point['gpus']} GPUs: "
            f"{point['output_tps_per_gpu']:.1f}/GPU, {rs['output_tps_per_rack']:.0f}/rack of 72)"
        )
        print(
            f"  cost: {rs['usd_per_gpu_hour']:.2f} USD/GPU-h, {rs['usd_per_target_hour']:.2f} USD/h for "
            f"the target, {rs['usd_per_rack_hour']:.2f} USD/rack-h, {rs['usd_per_m_output']:.2f} USD/M "
            f"out tokens [{rs['price_source']}]"
        )
        print(
            "  roles: "
            + "; ".join(
                f"{r['role']} {r['node']} {r['instance_id']} {r['instance_type']} tp{r['tensor_parallel']} {r['image']}"
                for r in point["roles"]
            )
        )
    ended = sb.clock.now()
    sb.clock.advance(res.deadline_s + 60)  # past the deadline, on the sandbox clock
    left = sb.live()[cloud]
    after = sb.billed_minutes(cloud, max(ended, began + res.deadline_s))
    billed = sb.billed_minutes(cloud, began, ended)
    print(
        f"  nodes left: {len(left)}; node-minutes billed while up: {billed:.2f}, after teardown and "
        f"the deadline: {after:.2f}"
    )
    return bool(left) or after > 0


# --- the recipe families as targets, on the local provider -----------------------------------

RECIPE_ARMS = (
    ("dsr1-fp8-gb200-dynamo-sglang", 0),
    ("dsr1-fp8-gb300-dynamo-sglang", 0),
    ("dsr1-fp4-mi355x-sglang-disagg", 0),
    ("dsv4-fp4-mi355x-atom-disagg", 1),
)


def recipes_on_local() -> int:
    import os  # noqa: PLC0415 - the local provider's state folder, for this run only
    import tempfile  # noqa: PLC0415

    from bakeoff.providers.local import LocalProvider  # noqa: PLC0415

    failures = 0
    with tempfile.TemporaryDirectory(prefix="rack-scale-recipes-") as tmp:
        os.environ["BAKEOFF_LOCAL_STATE"] = str(Path(tmp) / "local")
        provider = LocalProvider(grace_s=1.0)
        for name, arm in RECIPE_ARMS:
            t = Target(
                name=f"{name} arm {arm}",
                provider="local",
                recipe=name,
                recipe_arm=arm,
                cluster={"deadline_s": 120},
                emulator={"time_scale": 0.2},
            )
            print(_recipe_header(t))
            rid = f"rack-recipes-{uuid.uuid4().hex[:8]}"
            spec = {"api_key": KEY, "expires_at": time.time() + 900}
            try:
                res = cluster.provision(provider, t, rid, tags={"bakeoff:plan": "rack-scale"}, spec=spec)
            except cluster.ClusterFailed as e:
                print(f"  FAILED: {str(e)[:200]}")
                failures += 1
                continue
            try:
                cluster.check_roles(res, t, KEY, timeout_s=120)
                router = cluster.start_router(res, t, Path(tmp) / rid, expires_at=time.time() + 900)
                try:
                    point = _closed_loop(router.base_url, t.served_model_id)
                finally:
                    router.stop()
                rs = cost.rack_scale(t, point["output_tps"])
                print(
                    f"  served: conc {CONCURRENCY}, {REQUESTS} x ({ISL} in, {OSL} out): TTFT {point['ttft_s']:.3f} s, "
                    f"{point['output_tps']:.0f} out tok/s ({rs['output_tps_per_gpu']:.1f}/GPU, "
                    f"{rs['output_tps_per_rack']:.0f}/rack); {rs['usd_per_gpu_hour']:.2f} USD/GPU-h, "
                    f"{rs['usd_per_rack_hour']:.2f} USD/rack-h, {rs['usd_per_m_output']:.2f} USD/M out "
                    f"[{rs['price_source']}]; wall clock at time_scale {t.emulator.time_scale}, CPU-bound: the path, "
                    "not the hardware's figures"
                )
            finally:
                cluster.release(provider, rid, res, {})
            print("\n".join("  " + row for row in res.timeline()))
            left = provider.list_tagged(rid)
            print(f"  nodes left: {len(left)}")
            failures += bool(left)
    return 1 if failures else 0


# The four arms on the sandbox clouds whose catalogued cluster offers sell their GPU (clusters.yaml):
# EC2's gb200-nvl72 UltraServer trays; OCI's gb300-nvl72 trays and MI355X bare-metal nodes. Vultr sells
# MI355X too, but the catalog has no multi-node placement offer there, so plan check refuses a cluster.
SANDBOX_CLOUD = {"gb200": "aws", "gb300": "oci", "mi355x": "oci"}
SANDBOX_OPTIONS = {
    "aws": {"regions": ["us-east-1"]},
    "oci": {
        "regions": ["us-ashburn-1"],
        "availability_domains": ["Uocm:US-ASHBURN-AD-1"],
        "subnet_ocid": "ocid1.subnet.oc1.iad.aaaaaaaabakeoffsandboxsubnet00000000000000000000000000000000",
        "ready_timeout_s": 120,
        "deploy_timeout_s": 120,
    },
}


def _recipe_header(t: Target) -> str:
    """One line naming what a recipe arm rendered into: orchestrator, router, nodes, roles, KV path."""
    c, prov = t.cluster, multinode.provenance(t.recipe, t.recipe_arm) or {}
    shape = f"{c.rack} rack, " if c.rack else ""
    return (
        f"\n== {t.name} EMULATED: {prov.get('orchestrator')} + {t.stack}, router {prov.get('router')}; "
        f"{shape}{t.nodes} x {t.instance_type} ({t.gpus_used} GPUs billed), prefill {c.prefill.workers}x "
        f"tp{c.prefill.tp} ep{c.prefill.ep}, decode {c.decode.workers}x tp{c.decode.tp} ep{c.decode.ep}, "
        f"KV {c.kv_label}; {t.model} {t.quantization}"
    )


def recipes_in_sandbox() -> int:
    import os  # noqa: PLC0415 - the results folder, for this run only
    import tempfile  # noqa: PLC0415

    failures = 0
    with tempfile.TemporaryDirectory(prefix="rack-scale-recipes-") as tmp, Sandbox(boot_s=0.2) as sb, sb.exported():
        os.environ["BAKEOFF_DATA"] = str(Path(tmp) / "data")
        for name, arm in RECIPE_ARMS:
            cloud = SANDBOX_CLOUD[multinode.multinode_recipe(name).gpu]
            entry = {
                "name": f"{name} arm {arm}",
                "provider": cloud,
                "recipe": name,
                "recipe_arm": arm,
                "cluster": {"deadline_s": 120},
                "emulator": {"time_scale": 0.2},
                "provider_options": {**SANDBOX_OPTIONS[cloud], "ingress_cidr": "127.0.0.1/32", "client_mode": "remote"},
            }
            print(_recipe_header(Target(**entry)) + f" [sandbox {cloud}]")
            began = sb.clock.now()
            res, point, steps = _serve_in_sandbox(_plan_file(Path(tmp), entry, None, max_hours=2))
            print("-- steps (s from the provision call): " + "; ".join(steps))
            failures += _print_outcome(sb, cloud, began, res, point) or point is None
    return 1 if failures else 0


# --- part (c): the emulated disaggregated curve against InferenceX's published one ------------------

PUBLISHED = Path(__file__).resolve().parent / "data" / "inferencex_disagg_published.yaml"


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y on log x: how a curve grows with concurrency, whatever its level."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((x - mx) ** 2 for x in lx)
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly, strict=True)) / den if den else float("nan")


def _published_arm(shape: dict) -> tuple[multinode.MultinodeRecipe, multinode.Arm, int]:
    """The recipe arm at the post's lengths and concurrencies, and the highest concurrency the snapshot's
    arm itself runs (its engine config's decode batch holds only up to there)."""
    r = multinode.multinode_recipe(shape["recipe"])
    own = r.arms[shape["arm"]]
    arm = own.model_copy(
        update={"isl": shape["isl"], "osl": shape["osl"], "concurrency": [int(p[0]) for p in shape["points"]]}
    )
    return r, arm, max(own.concurrency)


def _emulated(shape: dict, draft_overhead_s: float) -> list[disagg.ShapePoint]:
    """One point per published concurrency. Beyond the snapshot arm's own concurrencies the post ran the
    same roles with a larger decode batch (its file is not in the snapshot): those run uncapped."""
    r, arm, own_max = _published_arm(shape)
    out = []
    for c in arm.concurrency:
        one = arm.model_copy(update={"concurrency": [c]})
        batch = None if c <= own_max else c
        out += disagg.disaggregated_curve(r, one, batch=batch, draft_overhead_s=draft_overhead_s)
    return out


def _log_error(shape: dict, draft_overhead_s: float) -> float:
    """RMS of log(emulated / published) over tokens/s/GPU and tokens/s/user at every point."""
    per_total = (shape["isl"] + shape["osl"]) / shape["osl"]
    errs = []
    for (_, p_tps, p_user), e in zip(shape["points"], _emulated(shape, draft_overhead_s), strict=True):
        errs += [math.log(e.output_tps_per_gpu * per_total / p_tps), math.log(e.tps_per_user / p_user)]
    return math.sqrt(sum(x * x for x in errs) / len(errs))


FIT_ON = "dsr1-fp4-gb200-dynamo-trt"  # the one arm DRAFT_PASS_OVERHEAD_S is fitted on; the others are held out
FIT_GRID_S = [i * 0.00005 for i in range(101)]  # 0 to 5 ms per draft pass


def against_published() -> int:
    doc = yaml.safe_load(PUBLISHED.read_text())
    src = doc["source"]
    print(
        f"EMULATED curves against published points: {src['repo']} {src['path']} at {src['commit'][:12]} "
        f"(published {src['published']}, measured {src['measured']})"
    )
    (fit_shape,) = [s for s in doc["shapes"] if s["recipe"] == FIT_ON]
    fitted = min(FIT_GRID_S, key=lambda x: _log_error(fit_shape, x))
    print(
        f"fit: draft-pass overhead on {FIT_ON} arm {fit_shape['arm']} only: {fitted * 1e3:.2f} ms "
        f"(disagg.DRAFT_PASS_OVERHEAD_S = {disagg.DRAFT_PASS_OVERHEAD_S * 1e3:.2f} ms); RMS log error, "
        "tok/s/GPU and tok/s/user together, at 0 ms (nothing fitted) -> at the constant:"
    )
    for shape in doc["shapes"]:
        role = "fitted on" if shape["recipe"] == FIT_ON else "HELD OUT"
        e0, e1 = _log_error(shape, 0.0), _log_error(shape, disagg.DRAFT_PASS_OVERHEAD_S)
        print(
            f"  {shape['recipe']} arm {shape['arm']} ({role}): {e0:.3f} -> {e1:.3f} "
            f"(typical factor {math.exp(e0):.2f}x -> {math.exp(e1):.2f}x)"
        )
    compared = set()
    for shape in doc["shapes"]:
        r, arm, own_max = _published_arm(shape)
        pts = shape["points"]
        if arm.gpus != shape["gpus"]:
            print(f"{r.name} arm {shape['arm']}: {arm.gpus} GPUs here, {shape['gpus']} published; not the same shape")
            return 1
        compared.add(r.name)
        emu = _emulated(shape, disagg.DRAFT_PASS_OVERHEAD_S)
        per_total = (arm.isl + arm.osl) / arm.osl
        role = "fitted on" if r.name == FIT_ON else "held out"
        print(
            f"\n== {r.name} arm {shape['arm']} ({role}): {arm.label}; {arm.gpus} GPUs, isl {arm.isl} / osl "
            f"{arm.osl}; decode batch {disagg.decode_batch(arm)} per worker up to c={own_max}"
        )
        print(
            f"{'conc':>5} {'pub tok/s/GPU':>13} {'emu':>8} {'emu/pub':>7} {'pub tok/s/user':>14} {'emu':>8} "
            f"{'emu/pub':>7} {'pub norm':>8} {'emu norm':>8} bound"
        )
        pub_t, emu_t, pub_u, emu_u = [], [], [], []
        for (c, p_tps, p_user), e in zip(pts, emu, strict=True):
            e_tps = e.output_tps_per_gpu * per_total
            pub_t.append(float(p_tps))
            emu_t.append(e_tps)
            pub_u.append(float(p_user))
            emu_u.append(e.tps_per_user)
            mark = " (larger batch, uncapped)" if c > own_max else ""
            print(
                f"{c:>5} {p_tps:>13,.1f} {e_tps:>8,.1f} {e_tps / p_tps:>7.2f} {p_user:>14,.1f} {e.tps_per_user:>8,.1f} "
                f"{e.tps_per_user / p_user:>7.2f} {p_tps / pub_t[0]:>8.2f} {e_tps / emu_t[0]:>8.2f} {e.bound}{mark}"
            )
        concs = [float(p[0]) for p in pts]
        print(
            f"  shape: tok/s/GPU grows with concurrency as c^{_slope(concs, pub_t):.2f} published, "
            f"c^{_slope(concs, emu_t):.2f} emulated; tok/s/user keeps {pub_u[-1] / pub_u[0]:.0%} published, "
            f"{emu_u[-1] / emu_u[0]:.0%} emulated from c={pts[0][0]} to c={pts[-1][0]}; level emu/pub "
            f"{min(e / p for e, p in zip(emu_t, pub_t, strict=True)):.2f}-"
            f"{max(e / p for e, p in zip(emu_t, pub_t, strict=True)):.2f} (throughput)"
        )
    rack = [
        n
        for n, r in multinode.multinode_recipes().items()
        if (r.gpu in ("gb200", "gb300") and r.orchestrator == "dynamo") or r.gpu == "mi355x"
    ]
    missing = sorted(set(rack) - compared)
    print(
        f"\nNo published points stored for {len(missing)} other rack-scale / MI355X recipes (shape only, "
        f"python benchmarks/rack_scale.py): {', '.join(missing)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
