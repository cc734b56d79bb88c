"""The command line's conventions: the plan taken the same way by every command, help on every argument,
the commands listed once, and the catalog listed with its sources and dates."""

from __future__ import annotations

import argparse
import re

import pytest

from bakeoff import catalog
from bakeoff.cli import _settle_plan, build_parser, main

PLAN_COMMANDS = (["plan", "check"], ["preflight"], ["predict"], ["run"], ["summary"])


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every (nested) command's parser by its full name, e.g. 'twin add-run'."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = sub
                out.update({f"{name} {k}": v for k, v in _subcommands(sub).items()})
    return out


def test_every_argument_of_every_command_has_help():
    missing = [
        f"{name}: {action.dest}"
        for name, sub in _subcommands(build_parser()).items()
        for action in sub._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) and not action.help
    ]
    assert missing == []


def test_top_level_help_lists_each_command_once(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    names = list(_subcommands(build_parser()))
    for name in (n for n in names if " " not in n):
        assert len(re.findall(rf"^\s+{re.escape(name)}(\s|$)", out, re.M)) == 1, name


@pytest.mark.parametrize("command", PLAN_COMMANDS, ids=lambda c: " ".join(c))
def test_every_command_takes_the_plan_positional_or_as_option(command):
    parser = build_parser()
    for argv in ([*command, "local-demo"], [*command, "--plan", "local-demo"]):
        args = parser.parse_args(argv)
        _settle_plan(parser, args)
        assert args.plan == "local-demo"


def test_a_plan_given_twice_differently_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        main(["predict", "local-demo", "--plan", "mi355x-vs-b200"])
    assert e.value.code == 2 and "the plan is given twice" in capsys.readouterr().err


def test_a_command_with_no_default_plan_asks_for_one(capsys):
    with pytest.raises(SystemExit):
        main(["preflight"])
    assert "preflight: give a plan" in capsys.readouterr().err


@pytest.mark.parametrize("what", ["gpus", "instances", "models", "engines", "prices"])
def test_catalog_lists_with_sources_and_dates(what, capsys):
    assert main(["catalog", what]) == 0
    out = capsys.readouterr().out
    header, *rows = out.splitlines()
    assert "_" not in header.split("  ")[0]  # labelled columns, not field names
    assert re.search(r"\d{4}-\d{2}-\d{2}", out)
    if what == "instances":
        assert len([r for r in rows if r.startswith(("aws", "oci", "vultr"))]) >= 3
    if what == "prices":
        priced = [it for it in catalog.instance_types().values() if it.usd_per_hour is not None]
        assert sum(1 for r in rows if re.match(r"^\w+\s+\w+\s+\S+\s+[\d,.]+\s+[\d,.]+", r)) == len(priced)


def test_catalog_instances_of_one_cloud(capsys):
    assert main(["catalog", "instances", "--cloud", "oci"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:-1]
    assert rows and all(r.startswith("oci ") for r in rows)
    assert "BM.GPU.MI355X.8" in "\n".join(rows)


def test_every_catalog_price_carries_its_snapshots_date():
    priced = [it for it in catalog.instance_types().values() if it.usd_per_hour is not None]
    undated = [it.type for it in priced if not re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", it.as_of)]
    assert priced and undated == []
