"""Accuracy answers: correct by default, wrong (result + 1) for a seeded share of questions."""

from __future__ import annotations

import pytest
from emulator_fixtures import make_config, make_target, serve

from bakeoff.serving.emulator import textgen


@pytest.mark.parametrize(
    "question,result",
    [("What is 41 * 2?", 82), ("What is -7 + 3?", -4), ("What is 10 - -5?", 15), ("What is 0 * 99?", 0)],
)
def test_correct_answer(question, result):
    r = textgen.reply(f"Answer with a number. {question}", 32, seed=0)
    assert r.words == [f" {result}"] and r.finish_reason == "stop"


def test_last_question_is_answered():
    few_shot = "What is 1 + 1? 2\nWhat is 2 + 2? 4\nWhat is 12 * 12?"
    assert textgen.reply(few_shot, 8, seed=0).text == " 144"


def test_answer_stops_even_at_one_token():
    assert textgen.reply("What is 5 - 7?", 1, seed=0) == textgen.Reply([" -2"], "stop")


def test_ignore_eos_pads_after_the_answer():
    r = textgen.reply("What is 3 * 3?", 5, seed=0, ignore_eos=True)
    assert r.words[0] == " 9" and len(r.words) == 5 and r.finish_reason == "length"


def test_error_rate_one_makes_every_answer_wrong():
    for a in range(-5, 6):
        assert textgen.answer(f"What is {a} * 3?", 0, 1.0) == a * 3 + 1


def test_error_rate_share_is_deterministic_and_about_right():
    qs = [f"What is {a} + {b}?" for a in range(40) for b in range(25)]
    wrong = [q for q in qs if textgen.answer(q, 0, 0.05) != eval(q[8:-1])]
    assert 25 <= len(wrong) <= 75  # 5% of 1000, binomial sd ~7
    assert wrong == [q for q in qs if textgen.answer(q, 0, 0.05) != eval(q[8:-1])]
    other_seed = [q for q in qs if textgen.answer(q, 1, 0.05) != eval(q[8:-1])]
    assert other_seed != wrong


def test_plain_prompt_is_not_a_question():
    r = textgen.reply("tell me about What is in the box", 6, seed=0, ignore_eos=True)
    assert len(r.words) == 6 and all(w[1:].isalpha() for w in r.words)


def test_server_uses_target_error_rate(run):
    async def answers(rate):
        async with serve(make_config(make_target(emulator={"accuracy_error_rate": rate}))) as s:
            out = []
            for a in range(5):
                body = {
                    "messages": [{"role": "user", "content": f"What is {a} * 7?"}],
                    "max_tokens": 16,
                    "temperature": 0,
                }
                r = await (await s.post("/v1/chat/completions", json=body)).json()
                out.append((r["choices"][0]["message"]["content"], r["choices"][0]["finish_reason"]))
            return out

    assert run(answers(0.0)) == [(f" {a * 7}", "stop") for a in range(5)]
    assert run(answers(1.0)) == [(f" {a * 7 + 1}", "stop") for a in range(5)]
