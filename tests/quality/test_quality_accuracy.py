"""Accuracy gate: the offline set, run_gate over real HTTP, the pass rule, cross-target agreement."""

from __future__ import annotations

import json

import pytest
from fake_completions import FakeCompletions
from quality_fixtures import make_plan, write_run

from bakeoff.core.endpoint import Endpoint
from bakeoff.quality import accuracy, evalset
from bakeoff.quality.validate import validate_run

KEY = "bk-test-key-0123456789"


def gate(server, plan, target, out_dir):
    ep = Endpoint(target=target.slug, base_url=server.base_url, model="llama-3.1-70b", stack="vllm", emulated=True)
    return accuracy.run_gate(ep, KEY, target, plan, out_dir)


def test_evalset_is_deterministic_well_formed_and_solvable():
    a, b = evalset.build(300, seed=1), evalset.build(300, seed=1)
    assert a == b and evalset.fingerprint(a) == evalset.fingerprint(b)
    assert evalset.fingerprint(evalset.build(300, seed=2)) != evalset.fingerprint(a)
    assert len({it.id for it in a}) == 300
    for it in a:
        assert it.prompt.endswith(f"Question: {it.question}\nAnswer:")
        assert evalset.QUESTION_RE.findall(it.question), it.question
        assert evalset.solve(it.prompt) == it.answer  # the last question wins over the few-shot ones
    assert any(not it.question.startswith("What is") for it in a)  # word problems present
    assert {m[1] for it in a for m in evalset.QUESTION_RE.findall(it.question)} == {"+", "-", "*"}


@pytest.mark.parametrize(
    "text,expected",
    [(" 82", 82), (" -7\n", -7), ("The answer is 42.", 42), (" 12 + 30 = 42", 12), ("", None), (" none", None)],
)
def test_parse_answer_takes_first_integer(text, expected):
    assert evalset.parse_answer(text) == expected


def test_gate_passes_correct_target_and_fails_five_percent_errors(tmp_path):
    plan = make_plan()
    good_t, bad_t = plan.targets
    with FakeCompletions(api_key=KEY) as good, FakeCompletions(error_rate=0.05, api_key=KEY) as bad:
        good_doc = gate(good, plan, good_t, tmp_path / "good")
        bad_doc = gate(bad, plan, bad_t, tmp_path / "bad")
    assert good_doc["n"] == 200 and good_doc["score"] == 1.0 and good_doc["errors"] == 0
    assert 0.90 <= bad_doc["score"] < 0.99 and bad_doc["errors"] == 0
    assert good_doc["mean_output_tokens"] == 1.0
    # what went over the wire: greedy, short, no ignore_eos, the key only in the header
    body = good.requests[0]
    assert body["temperature"] == 0 and body["max_tokens"] == plan.quality.accuracy.max_tokens
    assert "ignore_eos" not in body and body["prompt"].rstrip().endswith("Answer:")
    stored = json.loads((tmp_path / "good" / "accuracy.json").read_text())
    assert stored["score"] == 1.0 and len(stored["items"]) == 200 and KEY not in json.dumps(stored)

    verdict = accuracy.judge(plan, {"good": good_doc, "bad": bad_doc})
    assert verdict["reference"]["target"] == "good" and verdict["reference"]["score"] == 1.0
    assert verdict["targets"]["good"]["passed"]
    assert not verdict["targets"]["bad"]["passed"]
    assert "below 99% of 1.000 (target good)" in verdict["targets"]["bad"]["failures"][0]

    agree = accuracy.agreement({"good": good_doc, "bad": bad_doc})
    (pair,) = agree["pairs"]
    wrong = 200 - bad_doc["correct"]
    assert pair["n"] == 200 and pair["agree"] == 200 - wrong and pair["same_eval_set"]


def test_wrong_api_key_is_recorded_not_raised(tmp_path):
    plan = make_plan(accuracy={"eval_size": 5})
    with FakeCompletions(api_key="another-key") as srv:
        doc = gate(srv, plan, plan.targets[0], tmp_path)
    assert doc["score"] == 0.0 and doc["errors"] == 5 and doc["items"][0]["error"] == "HTTP 401"


def test_fixed_reference_and_output_length_rule(tmp_path):
    plan = make_plan(accuracy={"eval_size": 40, "reference": 0.9})
    t1, t2 = plan.targets
    with FakeCompletions() as terse, FakeCompletions(verbose=True) as chatty:
        a, b = gate(terse, plan, t1, tmp_path / "a"), gate(chatty, plan, t2, tmp_path / "b")
    v = accuracy.judge(plan, {"a": a, "b": b})
    assert v["reference"] == {
        "rule": "fixed",
        "target": None,
        "score": 0.9,
        "output_tokens": 1.0,
        "output_tokens_from": "a",
    }
    assert v["targets"]["a"]["passed"]
    (msg,) = v["targets"]["b"]["failures"]  # both correct; b says 6 words per answer instead of 1
    assert "mean output tokens 6.00 is outside +-10% of the reference 1.00" in msg


# slow: Great Expectations validates a whole run (29-35 s)
@pytest.mark.slow
def test_validate_run_applies_gate_and_reports_agreement(tmp_path):
    plan = make_plan(accuracy={"eval_size": 60})
    write_run(tmp_path, plan)
    good_t, bad_t = plan.targets
    with FakeCompletions() as good, FakeCompletions(error_rate=0.2) as bad:
        gate(good, plan, good_t, tmp_path / f"target={good_t.slug}")
        gate(bad, plan, bad_t, tmp_path / f"target={bad_t.slug}")
    s = validate_run(plan, tmp_path)
    assert s["targets"][good_t.slug]["passed"] and not s["passed"]
    bad_entry = s["targets"][bad_t.slug]
    assert bad_entry["gx_failures"] == [] and bad_entry["accuracy"]["score"] < 0.99
    assert bad_entry["failures"][0].startswith("accuracy: score")
    assert s["accuracy_reference"]["target"] == good_t.slug
    assert s["agreement"]["pairs"][0]["rate"] == bad_entry["accuracy"]["score"]


# slow: Great Expectations validates a whole run (29-35 s)
@pytest.mark.slow
def test_validate_run_fails_a_target_whose_gate_never_ran(tmp_path):
    plan = make_plan(accuracy={"eval_size": 10})
    write_run(tmp_path, plan)
    with FakeCompletions() as srv:
        gate(srv, plan, plan.targets[0], tmp_path / f"target={plan.targets[0].slug}")
    s = validate_run(plan, tmp_path)
    assert s["targets"]["mi355x-vllm"]["passed"]
    assert s["targets"]["b200-vllm"]["failures"] == [
        "accuracy: the gate did not run for this target (no accuracy.json)"
    ]


def test_lm_eval_backend_requires_the_package(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_lm_eval(name, *a, **kw):
        if name == "lm_eval" or name.startswith("lm_eval."):
            raise ImportError("No module named 'lm_eval'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_lm_eval)
    plan = make_plan(accuracy={"backend": "lm_eval"})
    ep = Endpoint(target="x", base_url="http://127.0.0.1:9", model="m", stack="vllm")
    with pytest.raises(RuntimeError, match="quality.accuracy.backend"):
        accuracy.run_gate(ep, None, plan.targets[0], plan, tmp_path)


def _doc(score, tokens=1.0, n=100):
    items = [{"id": f"q{i:05d}", "answer": i if i < score * n else None} for i in range(n)]
    return {
        "score": score,
        "n": n,
        "correct": int(score * n),
        "mean_output_tokens": tokens,
        "items": items,
        "eval_set": {"fingerprint": "x"},
    }


def test_all_targets_broken_fail_instead_of_matching_a_zero_reference():
    v = accuracy.judge(make_plan(), {"a": _doc(0.0), "b": _doc(0.0)})
    assert not v["targets"]["a"]["passed"] and not v["targets"]["b"]["passed"]
    assert "reference score is 0" in v["targets"]["a"]["failures"][0]


def test_best_rule_with_one_target_says_it_is_self_referential():
    v = accuracy.judge(make_plan(), {"a": _doc(0.7), "b": None})
    assert v["targets"]["a"]["passed"] and "compares it with itself" in v["reference"]["note"]
    assert not v["targets"]["b"]["passed"]


def test_agreement_counts_identical_answers_per_pair():
    docs = {"a": _doc(0.5), "b": _doc(0.5), "c": _doc(0.8)}
    pairs = {(p["a"], p["b"]): p for p in accuracy.agreement(docs)["pairs"]}
    assert pairs[("a", "b")]["rate"] == 1.0 and pairs[("a", "c")]["rate"] == pytest.approx(0.7)
    assert accuracy.agreement(docs)["min_rate"] == pytest.approx(0.7)


@pytest.mark.parametrize("bad", [1.5, 0, "worst", True])
def test_bad_reference_setting_names_the_field(bad):
    from bakeoff.plan import PlanError

    with pytest.raises(PlanError, match=r"quality\.accuracy\.reference: got .*use 'best'"):
        make_plan(accuracy={"reference": bad})


def _scored(score: float, n: int = 200) -> dict:
    """A builtin-set document as run_gate writes it (the floor applies only to the set it was measured on)."""
    return _doc(score, n=n) | {"eval_set": {"name": evalset.NAME, "fingerprint": "x"}}


def test_floor_fails_every_target_when_all_are_broken_the_same_way():
    """Both targets at 0.5: 'best' alone passes them (each equals the best); the model's floor does not."""
    plan = make_plan()
    docs = {"mi355x-vllm": _scored(0.5), "b200-vllm": _scored(0.5)}
    v = accuracy.judge(plan, docs)
    assert [v["targets"][s]["passed"] for s in docs] == [False, False]
    for s in docs:
        (failure,) = v["targets"][s]["failures"]  # the relative rule passes: only the floor speaks
        # llama-3.1-70b's floor is 1.000 (models.yaml); 99% of it is 0.990 (plan default min_score_ratio)
        assert "below the floor for llama-3.1-70b" in failure and "99% of 1.000" in failure and "= 0.990" in failure
        assert "0.500 (100/200)" in failure
    assert v["floors"]["b200-vllm"]["need"] == pytest.approx(0.99)


def test_floor_sits_under_the_relative_rule_not_in_place_of_it():
    plan = make_plan(accuracy={"min_score_ratio": 0.9})
    # 0.95 clears the floor (0.9 x 1.0 = 0.90) and 90% of the best (0.9 x 1.0); 0.85 fails both, each named
    v = accuracy.judge(plan, {"mi355x-vllm": _scored(1.0), "b200-vllm": _scored(0.85)})
    assert v["targets"]["mi355x-vllm"]["passed"]
    floor_msg, best_msg = v["targets"]["b200-vllm"]["failures"]
    assert "floor" in floor_msg and "= 0.900" in floor_msg
    assert "target mi355x-vllm" in best_msg and "floor" not in best_msg
    v = accuracy.judge(plan, {"mi355x-vllm": _scored(1.0), "b200-vllm": _scored(0.95)})
    assert v["targets"]["b200-vllm"]["passed"]


def test_floor_applies_only_to_the_set_it_was_measured_on():
    # an lm-eval run scores on another scale: no floor, the relative rule only
    plan = make_plan(accuracy={"backend": "lm_eval"})
    assert accuracy.floors(plan) == {}
    v = accuracy.judge(plan, {"mi355x-vllm": _scored(0.5), "b200-vllm": _scored(0.5)})
    assert v["targets"]["mi355x-vllm"]["passed"] and v["floors"] == {}
    # a document from another set is not held to this set's floor
    other = _doc(0.5) | {"eval_set": {"name": "another-set", "fingerprint": "y"}}
    v = accuracy.judge(make_plan(), {"mi355x-vllm": other, "b200-vllm": other})
    assert v["targets"]["mi355x-vllm"]["passed"]


def test_an_endpoint_that_never_answers_fails_the_gate_by_name_not_by_waiting(tmp_path):
    """A router that accepts connections and never answers (or an address whose SYNs vanish) fails
    the gate once a round of requests has timed out, naming it; not after every item's timeout in turn."""
    import socket
    import threading

    held: list[socket.socket] = []
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])  # accepted, never read, never answered
            except TimeoutError:
                continue

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    plan = make_plan(accuracy={"eval_size": 200, "concurrency": 8, "request_timeout_s": 0.5})
    ep = Endpoint(
        target="t", base_url=f"http://127.0.0.1:{srv.getsockname()[1]}", model="m", stack="vllm", emulated=True
    )
    try:
        with pytest.raises(accuracy.EndpointUnreachable, match=r"did not answer any of the first 8 requests"):
            accuracy.run_gate(ep, KEY, plan.targets[0], plan, tmp_path)
    finally:
        stop.set()
        acceptor.join()
        for c in held:
            c.close()
        srv.close()
    # one round: the first 8 requests, not the 200 items each waiting out its timeout in turn
    assert len(held) == 8
