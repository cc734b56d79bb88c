"""A provision retried after a lost create answer resends the very same launch request (tags, user-data,
token), so EC2 replays the first launch instead of refusing it (IdempotentParameterMismatch)."""

from __future__ import annotations

import time

import pytest
import yaml

from bakeoff import store
from bakeoff.plan import load_plan
from bakeoff.providers.aws import AwsProvider
from bakeoff.run import pipeline, provisioning


class LostAnswer(Exception):
    """The launch happened, its answer never came back."""


@pytest.mark.slow
def test_a_retried_provision_sends_the_same_launch(aws_creds, data_root, tmp_path, monkeypatch):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    raw["targets"] = [t for t in raw["targets"] if t["provider"] == "aws"]
    raw["targets"][0]["provider_options"]["client_mode"] = "remote"  # no staged bundle address in user-data
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw))
    slug = raw["targets"][0]["name"]
    rid = "retry_" + str(time.time_ns())
    run = pipeline.start_run(str(tmp_path / "plan.yaml"), rid)
    creds = lambda name: aws_creds if name == "aws" else {}  # noqa: E731
    sent: list[tuple] = []
    real_launch, real_list = AwsProvider._launch, AwsProvider.list_tagged

    def launch(self, target, run_id, tags, script, region, zone, launch=0):
        sent.append((dict(tags), script, launch))
        inst = real_launch(self, target, run_id, tags, script, region, zone, launch)
        if len(sent) == 1:
            raise LostAnswer(inst.id)
        return inst

    monkeypatch.setattr(AwsProvider, "_launch", launch)
    # the duplicate guard does not see the first node yet (EC2's listing is eventually consistent)
    monkeypatch.setattr(AwsProvider, "list_tagged", lambda self, run_id=None: [])
    with pytest.raises(LostAnswer) as lost:
        provisioning.provision(run["run_dir"], slug, credentials=creds)
    time.sleep(1.1)  # a retry comes later: an expiry computed afresh would differ
    inst = provisioning.provision(run["run_dir"], slug, credentials=creds)
    assert inst["id"] == str(lost.value)  # EC2 replayed the first launch: no second node
    assert sent[0] == sent[1]  # the same tags (expiry), user-data and launch number
    monkeypatch.setattr(AwsProvider, "list_tagged", real_list)
    assert [i.id for i in AwsProvider(aws_creds).list_tagged(rid)] == [inst["id"]]
    assert store.read_record(run["run_dir"], "launch", slug)["launch"] == 0
    AwsProvider(aws_creds).terminate(inst["id"])
