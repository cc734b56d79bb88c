"""`bakeoff ...` (or `python -m bakeoff ...`): the library without Airflow; `bakeoff --help` lists the commands."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from bakeoff import catalog, engines, images, installation, store
from bakeoff.bench.client.client_cores import client_cores, line, warnings
from bakeoff.bench.client.workloads import WorkloadFileError, check_files
from bakeoff.catalog import cli as catalog_cli
from bakeoff.core.facts import RunFacts
from bakeoff.fielderrors import explain
from bakeoff.plan import Plan, PlanError, Target, load_plan, multinode, recipes, resolve_plan_path
from bakeoff.plan.names import image_gaps, unverified_names
from bakeoff.plan.prices import market_mismatches
from bakeoff.prediction.predict import predict_plan, render
from bakeoff.preflight import blocking, preflight, table
from bakeoff.providers.credentials import credentials_from_env
from bakeoff.run import admission, steps, worker_time
from bakeoff.run.step_context import CredentialsFn
from bakeoff.secrets import installation_id
from bakeoff.serving import userdata
from bakeoff.serving.emulator import disagg


def _load(ref: str) -> Plan:
    """A plan whose workload files exist: a missing one is an error line here, not a traceback from the
    first estimate or step that reads it."""
    plan = load_plan(ref)
    try:
        check_files(plan.workloads)
    except WorkloadFileError as e:
        raise PlanError(f"{resolve_plan_path(ref).name}: {e}") from None
    return plan


def _plan_check(args: argparse.Namespace) -> int:
    plan = _load(args.plan)
    for t in plan.targets:
        hardware = f"{' or '.join(t.offers) or 'described hardware'} ({t.instance.gpus}x {t.gpu.name})"
        c = t.cluster  # a cluster's parallelism is its roles' (the target's own TP is its first node's)
        par = f"prefill {c.prefill.parallelism} | decode {c.decode.parallelism}" if c else f"TP{t.tensor_parallel}"
        print(
            f"{t.name}: {t.provider} {hardware}, {t.stack}, "
            f"{t.model} {t.quantization} {par}, {t.usd_per_hour:.2f} USD/h{' per node' if c else ''} [{t.price_source}]"
        )
        arm = f" arm {t.recipe_arm}" if t.recipe_arm is not None else ""
        print(f"  weights {t.checkpoint_id}" + (f", recipe {t.recipe}{arm}" if t.recipe else ""))
        mn = multinode.provenance(t.recipe, t.recipe_arm)
        if mn:
            print(
                f"  recipe: {mn['orchestrator']} with {mn['engine']} workers, router {mn['router'] or '-'}, "
                f"KV transfer {mn['kv_transfer'] or '-'} ({mn['source']} at {str(mn['commit'])[:12]}, {mn['date']})"
            )
        if t.custom:
            cs = t.custom
            words = " ".join(cs.command)
            print(f"  custom stack {cs.name}: {cs.image} {words}; health {cs.health_route}, port {cs.port}")
        if c:
            shape = f"{c.rack} rack, " if c.rack else ""
            print(
                f"  cluster: {shape}{t.nodes} nodes ({t.gpus_used} GPUs, each node billed), prefill "
                f"{c.prefill.workers}x tp{c.prefill.tp} ep{c.prefill.ep}, decode {c.decode.workers}x tp{c.decode.tp} "
                f"ep{c.decode.ep}, KV {c.kv_label}, all nodes up within {c.deadline_s:.0f}s or all released"
            )
        arm_spec = (mn or {}).get("speculative")
        if t.speculative:
            s = t.speculative
            pinned = f" pinned AL {t.pinned_acceptance_length:g}" if s.acceptance == "pinned" else " real acceptance"
            whence = f" (the recipe arm's {arm_spec}, the target's keys over it)" if arm_spec else ""
            print(f"  speculative {s.method} k={s.num_speculative_tokens}{pinned}{whence}")
        elif arm_spec:
            off = "not served (the target says speculative: null)"
            print(f"  speculative: {arm_spec.upper()} in the recipe arm, {off}")
        if t.kv_offload:
            print(f"  kv offload {t.kv_offload.backend} {t.kv_offload.host_memory_gb:g} GB host memory")
    admitted = admission.admit(plan)  # what run and the DAG's start_run would refuse, refused the same
    est = admitted.estimate
    print(
        f"budget: estimate {est.estimate_usd} USD of {est.cap_usd} USD cap, installation ceiling "
        f"{est.ceiling_usd:g} USD (predicted {est.estimate_low_usd} USD; the rest is the margin for the "
        "twin's error)"
    )
    for r in est.targets:
        print(f"  {r.target}: {r.usd_low}-{r.usd} USD, {r.hours} h; serving time {r.basis}")
    if admitted.node_limits:
        print("node limits: " + ", ".join(f"{k} {v}" for k, v in sorted(admitted.node_limits.items())))
    need = admitted.approval_needed
    print(f"approval: {'needed before spend' if need.required else 'not needed'} ({need.reason})")
    for row in client_cores(plan):
        print(line(row))
    for w in [
        *warnings(plan),
        *unverified_names(plan),
        *image_gaps(plan),
        *market_mismatches(plan),
        *admitted.warnings,
    ]:
        print(f"warning: {w}")
    return 0


def _preflight(args: argparse.Namespace) -> int:
    """Read-only checks of every target against its cloud; non-zero when any would stop the run."""

    rows = preflight(_load(args.plan), credentials_from_env)
    print(table(rows))
    bad = blocking(rows)
    print(f"preflight: {len(bad)} check(s) would stop the run" if bad else "preflight: nothing would stop the run")
    return 1 if bad else 0


def _run(args: argparse.Namespace) -> int:
    """Sequential bake-off: the declared steps (bakeoff.run.steps), per target with terminate in finally."""
    # SIGTERM (a CI timeout, a closed terminal) must still reach the finally blocks that terminate.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run_id = args.run_id or f"cli__{time.strftime('%Y%m%dT%H%M%S')}_{uuid.uuid4().hex[:6]}"
    return run_steps(args.plan, run_id, args.targets or [], Progress(), slot_poll_s=args.slot_poll_s)


# What a step's progress line says, where its name alone would say less.
_SAYS = {"benchmark": "benchmark (one line per point)"}


def run_steps(
    plan: str | Path,
    run_id: str,
    targets: list[str],
    progress: Progress,
    slot_poll_s: float = 5.0,
    creds: CredentialsFn = credentials_from_env,
) -> int:
    """Every step of bakeoff.run.steps.SEQUENCE in this process, in its order: the run's first steps, each
    target's steps one target after the other (its teardown in finally), then the run's last steps
    whatever happened; a progress line names each step as it starts. The exit status: 0, 1 when a step
    failed, 2 when the run needs an approval nobody here can give."""
    start, approve = steps.BEFORE
    run = steps.function(start)(plan, run_id, {"targets": targets})
    rdir = run["run_dir"]
    need = steps.function(approve)(rdir)
    if need:  # the DAG holds such a run at approve_spend; here nobody can be asked
        print(
            f"error: approval: this run needs a person's approval before spending ({need.get('reason')}); "
            "bakeoff run cannot ask for it, so nothing is provisioned. Trigger the plan in Airflow, where "
            "approve_spend asks the approvers (Variable bakeoff_approvers)",
            file=sys.stderr,
        )
        return 2
    progress(f"run {run_id} of plan {plan}: {len(run['targets'])} target(s)")
    failed: list[str] = []
    for i, slug in enumerate(run["targets"], 1):
        if not _target_steps(rdir, slug, progress.of(f"target {i}/{len(run['targets'])} {slug}"), slot_poll_s, creds):
            failed.append(slug)
    out: dict[str, Any] = {}
    for step in steps.AFTER:
        if step.trigger_rule == "all_success" and any(t not in out for t in step.takes):
            continue  # what it takes failed: skipped, as the DAG's upstream_failed
        progress(_SAYS.get(step.name, step.name))
        try:
            kwargs: dict[str, Any] = {"credentials": creds} if step.credentials else {}
            if step.failed_steps:  # this process is the run's orchestrator: it knows which steps failed
                kwargs["failed_steps"] = list(failed)
            out[step.name] = steps.function(step)(rdir, *(out[t] for t in step.takes), **kwargs)
        except Exception as e:  # noqa: BLE001 - a failed step is reported; the later ones still run
            failed.append(step.name)
            print(f"step {step.name} failed: {type(e).__name__}: {e}", file=sys.stderr)
    if "publish" in out:
        print(f"evidence bundle: {out['publish']['files']['evidence']}")
    _print_summary(store.run_facts(rdir), failed)
    return 1 if failed else 0


def _target_steps(rdir: str, slug: str, say: Callable[[str], None], slot_poll_s: float, creds: CredentialsFn) -> bool:
    """One target's steps of bakeoff.run.steps.PER_TARGET: those before its setup step (the node slot), then
    setup to its last step, then its teardown whatever happened. False when a step failed."""
    out: dict[str, Any] = {}
    setup = next(i for i, s in enumerate(steps.PER_TARGET) if s.role == "setup")
    for step in steps.PER_TARGET[:setup]:
        out[step.name] = _target_step(step, rdir, slug, out, say, slot_poll_s, creds)
    try:
        for step in steps.PER_TARGET[setup:]:
            if step.role != "teardown":
                out[step.name] = _target_step(step, rdir, slug, out, say, slot_poll_s, creds)
    except Exception as e:  # noqa: BLE001 - one target failing must not stop the others
        print(f"target {slug} failed: {type(e).__name__}: {e}", file=sys.stderr)
        return False
    finally:
        for step in steps.PER_TARGET:
            if step.role == "teardown":
                out[step.name] = _target_step(step, rdir, slug, out, say, slot_poll_s, creds)
    return True


def _target_step(
    step: steps.Step,
    rdir: str,
    slug: str,
    out: dict[str, Any],
    say: Callable[[str], None],
    slot_poll_s: float,
    creds: CredentialsFn,
) -> Any:
    """One per-target step: an action called once, a claim asked until granted, a check until it answers."""
    call = steps.function(step)
    inputs = [out.get(t) for t in step.takes]  # a teardown gets None for what never came
    kwargs: dict[str, Any] = {"credentials": creds} if step.credentials else {}
    if step.wait == "claim":  # the installation's node limit, as the DAG's wait_slot
        if not call(rdir, slug):
            say("waiting for a node slot (the installation's node limit)")
            while not call(rdir, slug):
                time.sleep(slot_poll_s)
        return True
    if step.wait == "check":
        return worker_time.until_done(call, rdir, slug, *inputs, **kwargs)
    say(_SAYS.get(step.name, step.name.replace("_", " ")))
    return call(rdir, slug, *inputs, **kwargs)


class Progress:
    """Step lines on stdout with the seconds since the run began, so a long run is never silent."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, what: str) -> None:
        print(f"[{time.monotonic() - self.start:5.0f} s] {what}", flush=True)

    def of(self, prefix: str) -> Callable[[str], None]:
        return lambda what: self(f"{prefix}: {what}")


def _predict(args: argparse.Namespace) -> int:
    plan = _load(args.plan)
    doc = predict_plan(plan)
    print(json.dumps(doc, indent=1) if args.json else render(doc))
    try:  # a prediction of a plan run would refuse says so, with run's message
        admission.admit(plan)
    except admission.REFUSALS as e:
        print(f"warning: bakeoff run and the DAG would refuse this plan on this installation: {e}", file=sys.stderr)
    return 0


def _plan_name(ref: str) -> str:
    """Runs are stored under the plan's own name, so a plan given as a file is looked up by the
    name inside it, not by its path."""
    if Path(ref).is_file() or ref.endswith((".yaml", ".yml")):
        return load_plan(ref).name
    return ref


def _summary(args: argparse.Namespace) -> int:
    name = _plan_name(args.plan)
    runs = store.list_runs(name)
    if not runs:
        shown = repr(name) if name == args.plan else f"{name!r} (from {args.plan})"
        print(f"no runs stored for plan {shown}", file=sys.stderr)
        return 1
    _print_summary(runs[0])
    return 0


def _recipes(args: argparse.Namespace) -> int:
    """List the vendored recipes, or show one: its source, target fields, engine command and environment."""
    if args.multinode or (args.name and args.name in multinode.multinode_recipes()):
        return _multinode_recipes(args)
    src = recipes.source()
    if args.action == "list":
        rows = [("recipe", "model", "gpu", "engine", "precision", "spec", "kv offload", "tp", "image")]
        for each in recipes.recipes().values():
            rows.append(
                (each.name, each.model, each.gpu, each.engine, each.precision)
                + (each.spec_label, each.kv_offload_label, str(each.tp), "floating" if each.floating else "pinned")
            )
        _table(rows)
        print(f"{len(rows) - 1} recipes from {src.get('repo')} at {str(src.get('commit'))[:12]} ({src.get('date')})")
        return 0
    if not args.name:
        print("error: recipes show needs a recipe name (python -m bakeoff recipes list)", file=sys.stderr)
        return 2
    r = recipes.resolve(args.name)
    if r is None:
        print(f"error: {recipes.unknown_recipe_message(args.name)}", file=sys.stderr)
        return 2
    print(f"{r.name}  (InferenceX {r.key}, {r.scenario})")
    print(f"source: {src.get('repo')} {r.source_file} at {src.get('commit')} ({src.get('date')}), {src.get('licence')}")
    print(f"script: {r.script}" + (f" (read at {r.script_commit})" if r.script_commit else ""))
    print(f"concurrency: {r.concurrency} (benchmark uses {r.middle_concurrency})")
    if r.isl:
        print(f"sequence lengths: {r.isl} in / {r.osl} out")
    if r.notes:
        print(f"notes: {r.notes}")
    print("target fields:")
    for key, value in r.template().items():
        print(f"  {key}: {value}")
    try:
        target = Target.model_validate({"name": r.name, "provider": recipes.HOME_CLOUD, "recipe": r.name})
    except ValidationError as e:
        print(f"error: bakeoff refuses this recipe as a target:\n{explain(e, root='(target)')}", file=sys.stderr)
        return 2
    port = target.stack_spec.port or 8000
    pin = "floating tag: no serving secrets" if r.floating else "pinned by digest"
    print(f"image: {userdata.image_for(target)} ({pin})")
    print("command: " + shlex.join(engines.command(target, port)))
    env = engines.environment(target)
    print("environment:" + ("" if env else " (none)"))
    for key, value in sorted(env.items()):
        print(f"  {key}={value}")
    for path, text in engines.extra_files(target).items():
        print(f"file {path}:")
        print("  " + text.rstrip().replace("\n", "\n  "))
    return 0


def _table(rows: Sequence[tuple[str, ...]]) -> None:
    print(catalog_cli.table(rows))


def _multinode_recipes(args: argparse.Namespace) -> int:
    """The multi-node, disaggregated recipes: list them, or show one's roles, footprint and emulated shape."""
    src = multinode.source()
    if args.action == "list":
        rows: list[tuple[str, ...]] = [
            ("recipe", "model", "gpu", "orchestrator", "engine", "precision", "arms", "gpus")
        ]
        for r in multinode.multinode_recipes().values():
            gpus = sorted({a.gpus for a in r.arms})
            rows.append((r.name, r.model, r.gpu, r.orchestrator, r.engine, r.precision, str(len(r.arms)))
                        + (f"{gpus[0]}-{gpus[-1]}" if len(gpus) > 1 else str(gpus[0]),))  # fmt: skip
        _table(rows)
        print(f"{len(rows) - 1} multi-node recipes from {src.get('repo')} at {str(src.get('commit'))[:12]} "
              f"({src.get('date')}); a target names one with recipe: and recipe_arm: (emulated clusters run "
              "on the local provider)")  # fmt: skip
        return 0
    try:
        r = multinode.multinode_recipe(args.name or "")
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    print(f"{r.name}  (InferenceX {r.key}, runner {r.runner})")
    print(f"source: {src.get('repo')} {r.source_file} at {src.get('commit')} ({src.get('date')}), {src.get('licence')}")
    print(f"{r.orchestrator} with {r.engine} workers, router {r.router or '-'}, KV transfer {r.kv_transfer or '-'}")
    print(f"image {r.image}, checkpoint {r.checkpoint}, {r.precision}")
    print(f"a target: recipe: {r.name}, recipe_arm: <arm> (its cluster); below, the emulator's paper model (EMULATED)")
    if r.gpu not in catalog.gpus():
        print(f"no emulated shape: {r.gpu} is not in the hardware catalog (catalog/hardware.yaml)")
        return 0
    for i, arm in enumerate(r.arms):
        fp = r.footprint(arm)
        where = f"{fp.racks} rack(s), KV over NVLink" if fp.racks else "KV over the scale-out network"
        print(f"arm {i}: {arm.label}; isl {arm.isl} / osl {arm.osl}; {fp.gpus} GPUs on {fp.nodes} nodes, {where}")
        rows = [("shape", "conc", "gpus", "tok/s/gpu", "tok/s/user", "ttft s", "bound")]
        for p in disagg.disaggregated_curve(r, arm) + disagg.single_node_curve(r, arm):
            rows.append((p.shape, str(p.concurrency), str(p.gpus), f"{p.output_tps_per_gpu:,.0f}")
                        + (f"{p.tps_per_user:,.1f}", f"{p.ttft_s:.3f}", p.bound))  # fmt: skip
        _table(rows)
    return 0


def _verify(args: argparse.Namespace) -> int:
    """0 when every hash and the signature check under a trusted key, 1 when the bundle fails (naming
    what changed), 3 when it is intact but its signer is no key trusted here."""
    from bakeoff.publishing import evidence  # noqa: PLC0415 - cryptography only for this command

    if args.show_key:
        key = evidence.installation_public_key()
        if key is None:
            print("error: no installation secret here (BAKEOFF_SECRET_KEY or secret.key under the data root)")
            return 2
        print(f"{key}  (key id {evidence.key_id(key)})")
        return 0
    if not args.bundle:
        print("error: verify needs a bundle path (or --show-key)", file=sys.stderr)
        return 2
    verdict = evidence.verify(args.bundle, public_key=args.public_key)
    print(evidence.describe(verdict))
    return 0 if verdict.ok else 3 if verdict.signer_unknown else 1


def _print_summary(run: RunFacts, failed: list[str] | None = None) -> None:
    """The run's outcome (given, or as its report recorded it), report files and headline."""
    if failed is None and run.report is not None:
        failed = list(run.report.failed_steps)
    outcome = "not reported" if failed is None else (f"failed ({', '.join(failed)})" if failed else "success")
    print(f"run {run.start.run_id} of plan {run.start.plan}: {outcome}")
    for kind, path in sorted((run.report.files if run.report else {}).items()):
        print(f"  {kind}: {path}")
    from bakeoff.cost.headline import headline_table  # noqa: PLC0415 - the cost package loads scipy, which the node's client has not

    print(headline_table(run.run_dir))


def _installation_id(args: argparse.Namespace) -> int:
    """For the independent reaper's BAKEOFF_INSTALLATION_ID (it holds no installation secret)."""

    print(installation_id())
    return 0


def _images(args: argparse.Namespace) -> int:
    """Resolve tags to digests and print the trusted-images Variable's value (a JSON list)."""

    wanted = list(args.images) + (images.recipe_images() if args.recipes else [])
    wanted += images.plan_images(args.plan) if args.plan else []
    if not wanted:
        print("error: images pin needs images, --recipes or --plan PLAN", file=sys.stderr)
        return 2
    try:
        pinned = images.pin_all(wanted, frozenset(args.plain_http or ()))
    except (images.ImageError, httpx.HTTPError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    value = sorted(set(pinned) | (installation.trusted_images() if args.merge else frozenset()))
    print(json.dumps(value, indent=1))
    print(
        f"set it: airflow variables set {installation.TRUSTED_IMAGES_VARIABLE} '{json.dumps(value)}' "
        f"(or {installation.TRUSTED_IMAGES_ENV}); a plan then names these images with image:",
        file=sys.stderr,
    )
    return 0


def add_plan_argument(p: argparse.ArgumentParser, default: str | None = None, what: str = "the plan") -> None:
    """The one way every command takes a plan: positional (``plan check PLAN``) or ``--plan PLAN``, both
    accepted everywhere so that earlier spellings keep working; a name under the plans folder or a file."""
    shown = f" (default {default})" if default else ""
    p.add_argument("plan", nargs="?", help=f"{what}: an installed plan's name or a YAML file{shown}")
    p.add_argument("--plan", dest="plan_option", metavar="PLAN", help="the same, as an option")
    p.set_defaults(plan_default=default)


def _settle_plan(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fold --plan into the positional plan: one of the two, or the command's default."""
    if not hasattr(args, "plan_option"):
        return
    given, option = args.plan, args.plan_option
    if given and option and given != option:
        parser.error(f"the plan is given twice ({given!r} and --plan {option!r}); give it once")
    args.plan = given or option or args.plan_default
    if not args.plan:
        parser.error(f"{args.command}: give a plan (a name such as local-demo, or a YAML file)")


def build_parser() -> argparse.ArgumentParser:
    """Every command and its arguments, each with its help (tests/cli/test_cli_conventions.py holds them to it)."""
    parser = argparse.ArgumentParser(
        prog="bakeoff",
        description="bakeoff: head-to-head evaluations of AI inference hardware, as cost per token at your SLO. "
        "The library without Airflow (also python -m bakeoff).",
        epilog="bakeoff COMMAND --help shows a command's arguments.",
    )
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    p = sub.add_parser("plan", help="check a plan file and print what it resolves to and would spend")
    p.add_argument("action", choices=["check"], help="check: validate the plan and print each target's facts")
    add_plan_argument(p, what="the plan to check")
    p.set_defaults(func=_plan_check)
    p = sub.add_parser("preflight", help="check with reads only that every target could launch (spends nothing)")
    add_plan_argument(p, what="the plan whose targets to check")
    p.set_defaults(func=_preflight)
    p = sub.add_parser("predict", help="predict each target's throughput, cost at the SLO and spend (calibrated twin)")
    add_plan_argument(p, what="the plan to predict")
    p.add_argument("--json", action="store_true", help="the whole prediction as JSON")
    p.set_defaults(func=_predict)
    p = sub.add_parser("run", help="run a whole bake-off in this process, without Airflow (teardown guaranteed)")
    add_plan_argument(p, default="local-demo", what="the plan to run")
    p.add_argument("--targets", nargs="*", metavar="NAME", help="run only these targets of the plan (default: all)")
    p.add_argument("--run-id", help="the run's id (default: cli__<UTC time>_<random>)")
    p.add_argument("--slot-poll-s", type=float, default=5.0, help="how often a target looks for a free node slot")
    p.set_defaults(func=_run)
    p = sub.add_parser("summary", help="print the latest run's outcome, report files and headline")
    add_plan_argument(p, default="local-demo", what="the plan whose latest run to show")
    p.set_defaults(func=_summary)
    catalog_cli.add_parser(sub)
    p = sub.add_parser("recipes", help="list the vendored InferenceX recipes, or show one and its engine command")
    p.add_argument("action", nargs="?", choices=["list", "show"], default="list", help="list (default) or show one")
    p.add_argument("name", nargs="?", help="the recipe to show (names from recipes list)")
    p.add_argument("--multinode", action="store_true", help="the multi-node, disaggregated recipes")
    p.set_defaults(func=_recipes)
    p = sub.add_parser("verify", help="check an evidence bundle's hashes and signature; print what it proves")
    p.add_argument("bundle", nargs="?", help="the bundle (.zip) to check")
    p.add_argument("--public-key", help="the signer's Ed25519 public key (hex); default: this installation's")
    p.add_argument("--show-key", action="store_true", help="print this installation's public key and exit")
    p.set_defaults(func=_verify)
    p = sub.add_parser("installation-id", help="print the id this installation tags its nodes with")
    p.set_defaults(func=_installation_id)
    p = sub.add_parser("images", help="resolve image tags to digests for the trusted-images Variable")
    p.add_argument("action", choices=["pin"], help="pin: resolve each image's tag to its digest")
    p.add_argument("images", nargs="*", help="[registry/]name[:tag]")
    p.add_argument("--recipes", action="store_true", help="every image the vendored recipes name")
    p.add_argument("--plan", help="the images a plan's targets would run (a name or a YAML file)")
    p.add_argument("--plain-http", action="append", metavar="HOST:PORT", help="a registry without TLS (local)")
    p.add_argument("--merge", action="store_true", help="keep the images already in $BAKEOFF_TRUSTED_IMAGES")
    p.set_defaults(func=_images)
    for module in ("bakeoff.bench.cli", "bakeoff.cleanup.reaper", "bakeoff.agent.cli", "bakeoff.prediction.cli"):
        __import__(module, fromlist=["add_parser"]).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _settle_plan(parser, args)
    try:
        rc: int = args.func(args)
        return rc
    except admission.REFUSALS as e:  # PlanError, BudgetExceeded, a node limit, a workload file...
        print(f"error: {e}", file=sys.stderr)
        return 2
