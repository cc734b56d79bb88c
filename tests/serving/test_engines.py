"""Engine renderers: the exact flags, environment and files per engine x (no spec, MTP real, MTP pinned,
EAGLE3, KV offload), and user-data for ATOM and TensorRT-LLM targets (size, front, options file)."""

from __future__ import annotations

import copy
import http.server
import json
import shlex
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
import yaml

from bakeoff import catalog, engines
from bakeoff.core import pinning
from bakeoff.engines import registry, sglang, trtllm
from bakeoff.plan import PlanError, load_plan, plan_from_dict
from bakeoff.serving import front as front_mod
from bakeoff.serving import readiness, tls, userdata
from bakeoff.serving.provenance import identify_engine
from tests.stub_host import docker_argv

KEY = "bk-" + "0123456789abcdef" * 2 + "01234567"
GLM = {"model": "glm-5.2", "tensor_parallel": 8}
MTP = {"method": "mtp", "num_speculative_tokens": 3}
PINNED = {**MTP, "acceptance": "pinned", "acceptance_length": 2.99}
EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3, "draft_model": "example-org/GLM-5.2-EAGLE3"}


@pytest.fixture(scope="module")
def tls_identity():
    ident = tls.node_identity("run-engines", "glm")
    return {"cert": ident.cert_pem, "key": ident.key_pem}


def target(provider="vultr", **changes):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = copy.deepcopy(next(x for x in raw["targets"] if x["provider"] == provider))
    t.update(changes)
    raw["targets"] = [t]
    return plan_from_dict(raw).targets[0]


def mi355x(stack, **changes):
    return target("vultr", stack=stack, quantization="mxfp4", **GLM, **changes)


def b200(stack, **changes):
    return target("aws", stack=stack, quantization="nvfp4", **GLM, **changes)


def flag(words: list[str], name: str) -> str:
    assert words.count(name) == 1, f"{name} appears {words.count(name)} times"
    return words[words.index(name) + 1]


# -- vLLM ---------------------------------------------------------------------------------------------


def test_vllm_plain_uses_the_checkpoint_and_no_spec_flags():
    w = engines.command(b200("vllm"), 8000)
    assert w[:2] == ["serve", "nvidia/GLM-5.2-NVFP4"] and flag(w, "--tensor-parallel-size") == "8"
    assert flag(w, "--quantization") == "modelopt_fp4" and "--speculative-config" not in w
    assert "--kv-transfer-config" not in w and "--enable-expert-parallel" not in w


def test_vllm_mtp_real_pinned_and_eagle3():
    conf = json.loads(flag(engines.command(b200("vllm", speculative=MTP), 8000), "--speculative-config"))
    assert conf == {"method": "mtp", "num_speculative_tokens": 3}
    conf = json.loads(flag(engines.command(b200("vllm", speculative=PINNED), 8000), "--speculative-config"))
    assert conf == {
        "method": "mtp",
        "num_speculative_tokens": 3,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.99,
    }
    conf = json.loads(flag(engines.command(b200("vllm", speculative=EAGLE3), 8000), "--speculative-config"))
    assert conf == {"method": "eagle3", "num_speculative_tokens": 3, "model": "example-org/GLM-5.2-EAGLE3"}


def test_vllm_parallelism_ep_and_dp_attention():
    w = engines.command(b200("vllm", expert_parallel=8, data_parallel_attention=True), 8000)
    assert flag(w, "--tensor-parallel-size") == "1" and flag(w, "--data-parallel-size") == "8"
    assert "--enable-expert-parallel" in w


def test_vllm_kv_offload_native_and_lmcache():
    t = b200("vllm", kv_offload={"backend": "vllm_native", "host_memory_gb": 1024})
    conf = json.loads(flag(engines.command(t, 8000), "--kv-transfer-config"))
    assert conf["kv_connector"] == "OffloadingConnector" and conf["kv_role"] == "kv_both"
    assert conf["kv_connector_extra_config"]["cpu_bytes_to_use"] == 1024 * 10**9
    assert engines.environment(t)["PYTHONHASHSEED"] == "42"
    t = b200("vllm", kv_offload={"backend": "lmcache", "host_memory_gb": 800})
    conf = json.loads(flag(engines.command(t, 8000), "--kv-transfer-config"))
    assert conf == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    env = engines.environment(t)
    assert env["LMCACHE_LOCAL_CPU"] == "True" and env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "100"  # 800 GB / 8 ranks


# -- SGLang -------------------------------------------------------------------------------------------


def test_sglang_plain_mtp_and_pinned():
    w = engines.command(mi355x("sglang"), 30000)
    assert flag(w, "--model-path") == "amd/GLM-5.2-MXFP4" and "--quantization" not in w  # MXFP4: the checkpoint says
    assert "--speculative-algorithm" not in w and "--enable-hierarchical-cache" not in w
    t = mi355x("sglang", speculative=MTP)
    w = engines.command(t, 30000)
    assert flag(w, "--speculative-algorithm") == "EAGLE" and flag(w, "--speculative-num-steps") == "3"
    assert flag(w, "--speculative-eagle-topk") == "1" and flag(w, "--speculative-num-draft-tokens") == "4"
    assert "--speculative-draft-model-path" not in w and "SGLANG_SIMULATE_ACC_LEN" not in engines.environment(t)
    env = engines.environment(mi355x("sglang", speculative=PINNED))
    assert env["SGLANG_SIMULATE_ACC_LEN"] == "2.99" and env["SGLANG_SIMULATE_ACC_METHOD"] == "match-expected"
    assert env["SGLANG_SIMULATE_ACC_TOKEN_MODE"] == "real-draft-token" and env["SGLANG_USE_AITER"] == "1"


def test_sglang_eagle3_hicache_and_parallelism():
    w = engines.command(mi355x("sglang", speculative=EAGLE3), 30000)
    assert flag(w, "--speculative-algorithm") == "EAGLE3"
    assert flag(w, "--speculative-draft-model-path") == "example-org/GLM-5.2-EAGLE3"
    t = mi355x(
        "sglang",
        expert_parallel=8,
        data_parallel_attention=True,
        kv_offload={"backend": "hicache", "host_memory_gb": 1600},
    )
    w = engines.command(t, 30000)
    assert "--enable-hierarchical-cache" in w and flag(w, "--hicache-size") == "200"  # GB per rank
    assert flag(w, "--hicache-write-policy") == "write_through"
    assert flag(w, "--ep-size") == "8" and flag(w, "--dp") == "8" and "--enable-dp-attention" in w


# -- ATOM ---------------------------------------------------------------------------------------------


def test_atom_plain_mtp_pinned_and_lmcache():
    w = engines.command(mi355x("atom", kv_cache_dtype="fp8"), 8000)
    assert w[:4] == ["-m", "atom.entrypoints.openai_server", "--model", "amd/GLM-5.2-MXFP4"]
    assert flag(w, "--server-port") == "8000" and flag(w, "--tensor-parallel-size") == "8"
    assert flag(w, "--kv_cache_dtype") == "fp8" and "--method" not in w
    w = engines.command(mi355x("atom", speculative=MTP), 8000)
    assert flag(w, "--method") == "mtp" and flag(w, "--num-speculative-tokens") == "3"
    assert "--spec-decode-acceptance-rate" not in w
    w = engines.command(mi355x("atom", speculative=PINNED), 8000)
    assert flag(w, "--spec-decode-acceptance-rate") == "0.6633"  # (2.99 - 1) / 3, as InferenceX's script derives it
    golden = mi355x("atom", speculative={"method": "mtp", "acceptance": "pinned"})  # the golden curve's AL
    assert flag(engines.command(golden, 8000), "--spec-decode-acceptance-rate") == "0.6633"
    t = mi355x(
        "atom",
        expert_parallel=8,
        data_parallel_attention=True,
        kv_offload={"backend": "lmcache", "host_memory_gb": 1600},
    )
    w = engines.command(t, 8000)
    assert json.loads(flag(w, "--kv-transfer-config")) == {"kv_connector": "lmcache_offload", "kv_role": "offload"}
    assert "--enable-dp-attention" in w and "--enable-expert-parallel" in w
    assert engines.environment(t)["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "200"


def test_atom_refuses_eagle3_and_hicache_at_plan_time():
    with pytest.raises(PlanError, match="speculative.method"):
        mi355x("atom", speculative=EAGLE3)
    with pytest.raises(PlanError, match="kv_offload.backend"):
        mi355x("atom", kv_offload={"backend": "hicache", "host_memory_gb": 100})


# -- TensorRT-LLM -------------------------------------------------------------------------------------


def options(t) -> dict:
    files = engines.extra_files(t)
    assert list(files) == [trtllm.TRTLLM_OPTIONS]
    return yaml.safe_load(files[trtllm.TRTLLM_OPTIONS])


def test_trtllm_plain_command_and_options_file():
    t = b200("trtllm", kv_cache_dtype="fp8")
    w = engines.command(t, 8000)
    assert w[:6] == ["-n", "1", "--oversubscribe", "--allow-run-as-root", "trtllm-serve", "nvidia/GLM-5.2-NVFP4"]
    assert flag(w, "--backend") == "pytorch" and "--trust_remote_code" not in w  # the catalog marks no model
    assert flag(w, "--tp_size") == "8" and flag(w, "--ep_size") == "1" and flag(w, "--pp_size") == "1"
    assert flag(w, "--extra_llm_api_options") == trtllm.TRTLLM_OPTIONS
    assert options(t) == {"kv_cache_config": {"dtype": "fp8"}, "enable_attention_dp": False, "print_iter_log": True}
    assert engines.extra_files(b200("vllm")) == {}


def test_trtllm_mtp_pinned_eagle3_and_dp_attention():
    t = b200("trtllm", speculative=MTP, expert_parallel=8, data_parallel_attention=True)
    o = options(t)
    assert o["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 3}
    assert o["enable_attention_dp"] is True and flag(engines.command(t, 8000), "--ep_size") == "8"
    assert "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS" not in engines.environment(t)
    env = engines.environment(b200("trtllm", speculative=PINNED))
    assert env["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"] == "1.99"  # draft tokens only: the AL minus one
    o = options(b200("trtllm", speculative=EAGLE3))
    assert o["speculative_config"] == {
        "decoding_type": "Eagle3",
        "max_draft_len": 3,
        "speculative_model": "example-org/GLM-5.2-EAGLE3",
    }
    with pytest.raises(PlanError, match="kv_offload.backend"):
        b200("trtllm", kv_offload={"backend": "lmcache", "host_memory_gb": 100})


# -- the catalog and user-data ------------------------------------------------------------------------


def test_every_deployable_stack_is_described_with_its_capabilities():
    stacks = catalog.stacks()
    assert set(engines.BOOT) <= set(stacks)  # a custom stack is described by its plan, not the catalog
    assert set(engines.ENGINES) - set(engines.BOOT) == {"custom"} and "custom" not in stacks
    assert stacks["atom"].images == {
        "rocm": "rocm/atom:rocm7.2.3_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom20260511"
    }
    assert stacks["trtllm"].images["cuda"].startswith("nvcr.io/nvidia/tensorrt-llm/release:")
    assert stacks["sglang"].kv_offload == ["hicache"] and stacks["vllm"].kv_offload == ["lmcache", "vllm_native"]
    assert stacks["atom"].metrics_prefix == "vllm:" and stacks["sglang"].metrics_prefix == "sglang:"
    assert "nvfp4" not in stacks["atom"].precisions


def render(t, tls=None):
    return userdata.render(t, api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32", tls=tls)


def run_lines(script: str) -> list[list[str]]:
    return [shlex.split(x) for x in script.splitlines() if x.startswith("docker run -d --name bakeoff-")]


@pytest.mark.parametrize("t", [lambda: mi355x("atom", speculative=PINNED), lambda: b200("trtllm", speculative=PINNED)])
def test_userdata_for_a_fronted_engine(t, tls_identity):
    t = t()
    script = render(t, tls_identity)
    assert len(script.encode()) < userdata.MAX_BYTES
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    front, serve = run_lines(script)  # the front first: it holds the serving port before the engine starts
    entry = serve[serve.index("--entrypoint") + 1]
    assert entry == engines.BOOT[t.stack].entrypoint and KEY not in " ".join(serve + front)
    assert flag(serve, "--host") == "127.0.0.1" and "--ssl-certfile" not in serve  # the engine: loopback only
    port = t.stack_spec.port
    tail = [str(port), str(port + 1), front_mod.KEY_FILE, userdata.TLS_CERT, userdata.TLS_KEY]
    assert front[front.index(front_mod.SCRIPT) + 1 :] == tail and "<<'BAKEOFF_FRONT'" in script
    assert "/etc/bakeoff/api_key:/etc/bakeoff/api_key:ro" in front and catalog.agent_image() in front
    assert script.count(KEY) == 1  # only in the root-only key file's heredoc: the front reads it from there
    if t.stack == "trtllm":
        path = trtllm.TRTLLM_OPTIONS
        assert f"{path}:{path}:ro" in serve
        written = script.split(f"cat > {path} <<'BAKEOFF_FILE'\n", 1)[1].split("\nBAKEOFF_FILE\n", 1)[0]
        assert yaml.safe_load(written) == yaml.safe_load(engines.extra_files(t)[path])
        assert "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS=1.99" in script
    else:
        assert flag(serve, "--server-port") == str(port + 1)


def test_userdata_for_vllm_and_sglang_keeps_tls_on_the_engine(tls_identity):
    t = b200("vllm", speculative=PINNED, kv_offload={"backend": "vllm_native", "host_memory_gb": 512})
    script = render(t, tls_identity)
    (serve,) = run_lines(script)
    assert flag(serve, "--host") == "0.0.0.0" and flag(serve, "--ssl-certfile") == userdata.TLS_CERT
    # the JSON words reach docker verbatim through the shell
    line = next(x for x in script.splitlines() if x.startswith("docker run -d --name bakeoff-serve"))
    out = docker_argv(line)
    assert flag(out, "--speculative-config") == flag(engines.command(t, 8000), "--speculative-config")
    assert json.loads(flag(out, "--kv-transfer-config"))["kv_connector"] == "OffloadingConnector"
    (serve,) = run_lines(render(mi355x("sglang", speculative=PINNED), tls_identity))
    assert flag(serve, "--ssl-certfile") == userdata.TLS_CERT and flag(serve, "--config") == sglang.SGLANG_CONFIG


class _Engine(http.server.BaseHTTPRequestHandler):
    """A stand-in engine on loopback: says what it was sent, and streams a body in pieces."""

    def do_POST(self):
        n = int(self.headers["Content-Length"])
        seen = {"body": self.rfile.read(n).decode(), "auth": self.headers.get("Authorization"), "path": self.path}
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for piece in (b"data: " + json.dumps(seen).encode() + b"\n\n", b"data: [DONE]\n\n"):
            self.wfile.write(piece)
            self.wfile.flush()
            time.sleep(0.05)

    def log_message(self, *args):
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_front_checks_the_key_serves_tls_and_streams(tmp_path, tls_identity):
    engine = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    (tmp_path / "key").write_text(KEY + "\n")
    (tmp_path / "crt").write_text(tls_identity["cert"])
    (tmp_path / "pem").write_text(tls_identity["key"])
    port = _free_port()
    argv = [
        str(port),
        str(engine.server_address[1]),
        str(tmp_path / "key"),
        str(tmp_path / "crt"),
        str(tmp_path / "pem"),
    ]
    proc = subprocess.Popen([sys.executable, "-c", front_mod.program(), *argv])
    try:
        ctx = pinning.pinned_context(tls_identity["cert"])
        url = f"https://127.0.0.1:{port}"
        for _ in range(100):
            try:
                httpx.get(url + "/health", verify=ctx, timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        assert httpx.post(url + "/v1/completions", json={}, verify=ctx).status_code == 401
        bad = {"Authorization": "Bearer " + KEY[:-1] + "x"}
        assert httpx.post(url + "/v1/completions", json={}, headers=bad, verify=ctx).status_code == 401
        with pytest.raises(httpx.HTTPError):  # plain http is not served
            httpx.post(f"http://127.0.0.1:{port}/v1/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=2)
        good = {"Authorization": f"Bearer {KEY}"}
        with httpx.stream("POST", url + "/v1/completions", json={"p": 1}, headers=good, verify=ctx) as r:
            assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
            events = [line for line in r.iter_lines() if line]
        seen = json.loads(events[0][len("data: ") :])
        assert seen == {"body": '{"p":1}', "auth": None, "path": "/v1/completions"}  # the key stops at the front
        assert events[1] == "data: [DONE]"
    finally:
        proc.terminate()
        proc.wait(10)
        engine.shutdown()


def _snap(version=None, owner=None, metrics=""):
    return {
        "version": {"status": 200, "json": version} if version else {"status": 404},
        "models": {"status": 200, "json": {"data": [{"id": "m", "owned_by": owner}]}},
        "metrics": {"status": 200, "text": metrics},
    }


def test_provenance_recognises_atom_and_tensorrt_llm():
    trt = identify_engine(_snap({"version": "1.3.0rc23"}, "tensorrt_llm"))
    assert trt == {"stack": "trtllm", "engine_version": "1.3.0rc23", "identified_from": "/v1/models"}
    assert identify_engine(_snap(None, "x", "trtllm_request_success_total 3\n"))["stack"] == "trtllm"
    assert identify_engine(_snap(None, "atom"))["stack"] == "atom"
    assert identify_engine(_snap({"version": "0.1.3", "engine": "ATOM"}, "x"))["stack"] == "atom"
    # ATOM exports vLLM's metric names: from /metrics alone it reads as vLLM, and says where it looked
    assert identify_engine(_snap(None, "x", "vllm:num_requests_running 0\n"))["identified_from"] == "/metrics"
    assert identify_engine(_snap(None, "anatomy"))["stack"] == "unknown"  # a whole word, not a substring


@pytest.mark.parametrize(
    ("log", "kind"),
    [
        ("[TensorRT-LLM][ERROR] Assertion failed: mpiSize == tp * pp", "crash"),
        ("RuntimeError: CUDA error: cudaErrorMemoryAllocation", "oom"),
        ("[TensorRT-LLM][ERROR] Failed to allocate memory for KV cache", "oom"),
        ("ValueError: Unknown decoding_type: EAGLE9", "unsupported"),
        ("Error: No such option: --hicache-size", "unsupported"),
        ("atom: error: unrecognized arguments: --speculative-algorithm", "unsupported"),
        ("NotImplementedError: speculative decoding with eagle3 is not supported for GlmMoeDsa", "unsupported"),
        ("RuntimeError: HIP error: invalid device function", "unsupported"),
        ("gfx942 is not supported by the MXFP4 MoE kernel", "unsupported"),
        ("ValueError: Unsupported quantization algorithm NVFP4 on sm_90", "unsupported"),
        ("RuntimeError: HIP error: an illegal memory access was encountered", "crash"),
        ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp", "crash"),
    ],
)
def test_classify_reads_atom_and_tensorrt_llm_logs(log, kind):
    assert readiness.classify(f"loading weights\n{log}\nbakeoff: bakeoff-serve exited with code 1\n") == (kind, log)


@pytest.mark.parametrize("stack", ["vllm", "sglang", "atom", "trtllm"])
def test_the_boot_script_starts_each_engine_as_its_boot_entry_declares(stack, monkeypatch):
    """docker run and the key lines come from the engine's ``engines.Boot``; a changed entry changes them."""
    from dataclasses import replace

    t = b200(stack) if stack == "trtllm" else mi355x(stack)
    argv = userdata.docker_argv(t, 8000, tls=True)
    b = engines.BOOT[stack]
    assert argv[argv.index("--entrypoint") + 1] == b.entrypoint
    assert ("--ssl-certfile" in argv) is (not b.fronted) and ("127.0.0.1" in argv) is b.fronted
    for word in (*b.key_args, *b.tail_args):
        assert word in argv
    planted = replace(b, entrypoint="/opt/other", key_line="# planted")
    monkeypatch.setitem(registry.REGISTERED, stack, replace(registry.REGISTERED[stack], boot=planted))
    argv = userdata.docker_argv(t, 8000)
    assert argv[argv.index("--entrypoint") + 1] == "/opt/other" and userdata._key_files(t) == "# planted"
