"""The emulator's routes: health, models, version, metrics, auth, request validation, lengths."""

from __future__ import annotations

import asyncio
import math

import pytest
from emulator_fixtures import MODEL_70B, make_config, make_target, serve

M = MODEL_70B


def test_health_models_version(run):
    async def go():
        async with serve(make_config()) as s:
            h = await s.get("/health")
            models = await (await s.get("/v1/models")).json()
            version = await (await s.get("/version")).json()
            return h.status, models, version

    status, models, version = run(go())
    assert status == 200
    assert [m["id"] for m in models["data"]] == [M] and models["object"] == "list"
    assert models["data"][0]["max_model_len"] == 131072
    assert version["emulated"] is True and version["version"].startswith("bakeoff-emulator-")
    assert version["gpu"] == "mi355x" and version["gpus"] == 8 and version["time_scale"] == 1.0
    assert version["roofline"]["kv_bytes_per_token"] == 2 * 80 * 8 * 128 * 1


def test_time_scale_reported(run):
    async def go():
        async with serve(make_config(make_target(emulator={"time_scale": 4.0}))) as s:
            return await (await s.get("/version")).json(), await (await s.get("/metrics")).text()

    version, metrics = run(go())
    assert version["time_scale"] == 4.0
    assert f'bakeoff_emulator_time_scale{{model_name="{M}"}} 4.0' in metrics


def test_metrics_counts_tokens_and_requests(run):
    async def go():
        async with serve(make_config()) as s:
            for _ in range(2):
                await s.post("/v1/completions", json={"prompt": "one two three", "max_tokens": 5, "ignore_eos": True})
            r = await s.get("/metrics")
            return r.headers["Content-Type"], await r.text()

    ctype, text = run(go())
    assert ctype.startswith("text/plain")
    lines = set(text.splitlines())
    assert f'vllm:prompt_tokens_total{{model_name="{M}"}} 6.0' in lines
    assert f'vllm:generation_tokens_total{{model_name="{M}"}} 10.0' in lines
    assert f'vllm:request_success_total{{finished_reason="length",model_name="{M}"}} 2.0' in lines
    assert f'vllm:num_requests_running{{model_name="{M}"}} 0.0' in lines


def test_waiting_requests_when_sequence_slots_are_full(run):
    """max_num_seqs=1: of three concurrent requests one runs and two wait (seen in /metrics)."""
    target = make_target(emulator={"max_num_seqs": 1, "time_scale": 20.0})  # ~40 ms per decode step

    async def go():
        async with serve(make_config(target)) as s:
            body = {"prompt": "a b c", "max_tokens": 8, "ignore_eos": True}
            tasks = [asyncio.create_task(s.post("/v1/completions", json=body)) for _ in range(3)]
            await asyncio.sleep(0.15)
            text = await (await s.get("/metrics")).text()
            for resp in await asyncio.gather(*tasks):
                assert resp.status == 200
            after = await (await s.get("/metrics")).text()
            return text, after

    during, after = run(go())
    assert f'vllm:num_requests_running{{model_name="{M}"}} 1.0' in during
    assert f'vllm:num_requests_waiting{{model_name="{M}"}} 2.0' in during
    assert f'vllm:num_requests_waiting{{model_name="{M}"}} 0.0' in after


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv("EMU_TEST_KEY", "k-123")
    return make_config(api_key_env="EMU_TEST_KEY")


def test_auth_required_when_key_set(run, keyed):
    async def go():
        async with serve(keyed) as s:
            body = {"prompt": "hi", "max_tokens": 1}
            no_key = await s.post("/v1/completions", json=body)
            wrong = await s.get("/v1/models", headers={"Authorization": "Bearer nope"})
            good = await s.post("/v1/completions", json=body, headers={"Authorization": "Bearer k-123"})
            health = await s.get("/health")
            return no_key.status, await no_key.json(), wrong.status, good.status, health.status

    status, err, wrong, good, health = run(go())
    assert (status, wrong, good, health) == (401, 401, 200, 200)
    assert err["error"]["type"] == "invalid_request_error" and "k-123" not in str(err)


def test_no_auth_when_variable_unset(run, monkeypatch):
    monkeypatch.delenv("EMU_TEST_KEY", raising=False)

    async def go():
        async with serve(make_config(api_key_env="EMU_TEST_KEY")) as s:
            return (await s.get("/v1/models")).status

    assert run(go()) == 200


@pytest.mark.parametrize(
    "path,body,status,needle",
    [
        ("/v1/completions", {"model": "other/model", "prompt": "x"}, 404, "does not exist"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": "5"}, 400, "max_tokens"),
        ("/v1/completions", {"max_tokens": 5}, 400, "prompt"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 200000}, 400, "maximum context length"),
        ("/v1/chat/completions", {"messages": []}, 400, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 2}, 400, "n=2"),
    ],
)
def test_bad_requests(run, path, body, status, needle):
    async def go():
        async with serve(make_config()) as s:
            r = await s.post(path, json=body)
            return r.status, await r.json()

    got, err = run(go())
    assert got == status and needle in err["error"]["message"]
    assert err["error"]["code"] == status


def test_invalid_json_body(run):
    async def go():
        async with serve(make_config()) as s:
            r = await s.post("/v1/completions", data=b"{not json", headers={"Content-Type": "application/json"})
            return r.status, await r.json()

    status, err = run(go())
    assert status == 400 and "not valid JSON" in err["error"]["message"]


def test_lengths_with_and_without_ignore_eos(run):
    """ignore_eos: exactly max_tokens ("length"). Otherwise a deterministic stop in [max/2, max]."""

    async def go():
        async with serve(make_config()) as s:
            out = []
            for i in range(20):
                for ignore in (True, False):
                    body = {"prompt": f"prompt number {i}", "max_tokens": 9, "ignore_eos": ignore}
                    r = await (await s.post("/v1/completions", json=body)).json()
                    out.append(
                        (
                            ignore,
                            r["usage"]["completion_tokens"],
                            len(r["choices"][0]["text"].split()),
                            r["choices"][0]["finish_reason"],
                        )
                    )
            return out

    rows = run(go())
    for ignore, n, words, finish in rows:
        assert n == words
        if ignore:
            assert (n, finish) == (9, "length")
        else:
            assert math.ceil(9 / 2) <= n <= 9
            assert finish == ("length" if n == 9 else "stop")
    assert len({n for ignore, n, _, _ in rows if not ignore}) > 1, "stop length should vary with the prompt"


def test_output_is_deterministic_and_seeded(run):
    body = {"prompt": "same words here", "max_tokens": 10, "ignore_eos": True}

    async def text(cfg):
        async with serve(cfg) as s:
            return (await (await s.post("/v1/completions", json=body)).json())["choices"][0]["text"]

    a, b = run(text(make_config())), run(text(make_config()))
    c = run(text(make_config(make_target(emulator={"seed": 7}))))
    assert a == b and a != c


def test_chat_counts_every_message_and_token_id_prompts(run):
    async def go():
        async with serve(make_config()) as s:
            chat = await (
                await s.post(
                    "/v1/chat/completions",
                    json={
                        "max_tokens": 1,
                        "messages": [
                            {"role": "system", "content": "one two"},
                            {"role": "user", "content": [{"type": "text", "text": "three four five"}]},
                        ],
                    },
                )
            ).json()
            ids = await (await s.post("/v1/completions", json={"prompt": [1, 2, 3, 4], "max_tokens": 1})).json()
            return chat["usage"]["prompt_tokens"], ids["usage"]["prompt_tokens"]

    # 5 words, plus the chat template: begin (1) + 2 messages x 5 + the assistant header (4)
    assert run(go()) == (5 + 1 + 2 * 5 + 4, 4)


def running(metrics: str) -> str:
    return next(line for line in metrics.splitlines() if line.startswith("vllm:num_requests_running"))


@pytest.mark.parametrize("scripted", [False, True])
def test_client_disconnect_frees_the_slot(run, scripted):
    cfg = (
        {"mode": "scripted", "scripted": {"ttft_ms": 1, "itl_ms": 20}}
        if scripted
        else make_config(make_target(emulator={"time_scale": 10.0}))
    )

    async def go():
        async with serve(cfg) as s:
            r = await s.post(
                "/v1/completions", json={"prompt": "a", "max_tokens": 200, "ignore_eos": True, "stream": True}
            )
            await r.content.readline()
            before = await (await s.get("/metrics")).text()
            r.close()  # drop the connection mid-stream
            for _ in range(100):
                after = await (await s.get("/metrics")).text()
                if running(after).endswith(" 0.0"):
                    break
                await asyncio.sleep(0.05)
            return before, after

    before, after = run(go())
    assert running(before).endswith(" 1.0") and running(after).endswith(" 0.0")
    aborted = next(line for line in after.splitlines() if line.startswith("bakeoff_emulator_aborted_requests_total"))
    assert aborted.endswith(" 1.0")


def test_tokenize_counts_as_usage_does(run):
    """POST /tokenize (vLLM's shape) agrees with the usage the generation routes report, for a
    completion prompt and for chat messages."""
    prompt = "alpha bravo  charlie delta"
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": prompt}]

    async def go():
        async with serve(make_config()) as s:
            tok = await (await s.post("/tokenize", json={"model": M, "prompt": prompt})).json()
            chat = await (await s.post("/tokenize", json={"model": M, "messages": messages})).json()
            usage = (await (await s.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1})).json())["usage"]
            cusage = (
                await (await s.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 1})).json()
            )["usage"]
            bad = await s.post("/tokenize", json={"model": "other", "prompt": prompt})
            return tok, chat, usage, cusage, bad.status

    tok, chat, usage, cusage, bad = run(go())
    assert tok["count"] == len(tok["tokens"]) == usage["prompt_tokens"] == 4
    assert tok["max_model_len"] == 131072 and len(set(tok["tokens"])) == 4
    assert chat["count"] == cusage["prompt_tokens"] == len(chat["tokens"]) == 6 + 1 + 2 * 5 + 4  # words + template
    assert bad == 404
