"""Stand-in engine images for the node rehearsal: bakeoff's emulator behind each engine family's real
entrypoint, so the ``docker run`` the boot script renders for vLLM, SGLang, ATOM and TensorRT-LLM runs as
written (its entrypoint, its argv, its key and TLS hand-over) with no GPU.

One program (``stand_in.py``) reads the argv the way the engine's own parser would for the words the node
depends on (model, host, port, TLS files, where the key comes from), prints every other flag it was given,
and execs the emulator. Each family gets only its own entrypoint names in its image:

- vLLM: ``vllm serve MODEL`` (``--entrypoint vllm``), the key in ``VLLM_API_KEY`` (``--env-file``);
- SGLang: ``python3 -m sglang.launch_server --model-path``, the key in the ``--config`` YAML's ``api-key``;
- ATOM: ``python3 -m atom.entrypoints.openai_server --model --server-port``, on loopback behind the front;
- TensorRT-LLM: ``mpirun ... trtllm-serve MODEL``, on loopback behind the front, reading
  ``--extra_llm_api_options``.
"""

from __future__ import annotations

STAND_IN = r'''#!/usr/bin/python3
"""STAND-IN engine (bakeoff node rehearsal): reads the engine's argv for what the node depends on and runs
bakeoff's emulator there; no GPU, no model."""
import argparse, os, re, sys

def serve(family, ap, argv, key=None):
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--ssl-certfile")
    ap.add_argument("--ssl-keyfile")
    a, rest = ap.parse_known_args(argv)
    print(f"STAND-IN {family} (bakeoff emulator): serve {a.model} on {a.host}:{a.port}; engine flags:",
          " ".join(rest), flush=True)
    env = dict(os.environ)
    env.pop("BAKEOFF_STAND_IN_KEY", None)
    if key:
        env["BAKEOFF_STAND_IN_KEY"] = key
    tls = ["--tls-cert", a.ssl_certfile, "--tls-key", a.ssl_keyfile] if a.ssl_certfile else []
    os.execve(sys.executable, [sys.executable, "-m", "bakeoff.serving.emulator", "--config",
              "/opt/stand-in/config.json", "--host", a.host, "--port", str(a.port), *tls], env)

def main(prog, argv):
    if prog == "vllm":
        if not argv or argv[0] != "serve":
            sys.exit("vllm: only `vllm serve` is stood in")
        ap = argparse.ArgumentParser(prog="vllm serve")
        ap.add_argument("model")
        ap.add_argument("--port", type=int, default=8000)
        serve("vllm", ap, argv[1:], os.environ.get("VLLM_API_KEY"))
    elif prog == "sglang.launch_server":
        ap = argparse.ArgumentParser(prog="sglang.launch_server")
        ap.add_argument("--model-path", dest="model", required=True)
        ap.add_argument("--port", type=int, default=30000)
        ap.add_argument("--config")
        a, _ = ap.parse_known_args(argv)
        key = None
        if a.config:  # SGLang's --config YAML: its keys are the long flags' names
            m = re.search(r'^api-key:\s*"?([^"\n]+)"?\s*$', open(a.config).read(), re.M)
            key = m.group(1) if m else None
        serve("sglang", ap, argv, key)
    elif prog == "atom.entrypoints.openai_server":
        ap = argparse.ArgumentParser(prog="atom.entrypoints.openai_server")
        ap.add_argument("--model", required=True)
        ap.add_argument("--server-port", dest="port", type=int, default=8000)
        serve("atom", ap, argv)
    elif prog == "mpirun":  # mpirun's own options, then the program it starts (one rank here)
        i = next((i for i, w in enumerate(argv) if not w.startswith("-") and argv[i - 1] not in ("-n", "-np")), None)
        if i is None:
            sys.exit("mpirun: no program")
        print("STAND-IN mpirun: one rank of", argv[i], flush=True)
        os.execvp(argv[i], argv[i:])
    elif prog == "trtllm-serve":
        ap = argparse.ArgumentParser(prog="trtllm-serve")
        ap.add_argument("model")
        ap.add_argument("--port", type=int, default=8000)
        ap.add_argument("--extra_llm_api_options")
        a, _ = ap.parse_known_args(argv)
        if a.extra_llm_api_options and not os.path.isfile(a.extra_llm_api_options):
            sys.exit(f"trtllm-serve: --extra_llm_api_options {a.extra_llm_api_options}: no such file")
        serve("trtllm", ap, argv)
    else:
        sys.exit(f"no stand-in for {prog}")

if __name__ == "__main__":
    sys.exit("run as an engine's entrypoint")
'''

# a module ``python3 -m`` starts: hands its argv to the stand-in under the module's name
_MODULE = "import sys\nsys.path.insert(0, '/opt/stand-in')\nimport stand_in\nstand_in.main({name!r}, sys.argv[1:])\n"
# a console script named for the engine's program: the same, as an executable on PATH
_SCRIPT = "#!/usr/bin/python3\n" + _MODULE

# per family: files the image holds (path in the image -> text), besides stand_in.py
ENTRYPOINTS: dict[str, dict[str, str]] = {
    "vllm": {"/usr/local/bin/vllm": _SCRIPT.format(name="vllm")},
    "sglang": {
        "/opt/stand-in/site/sglang/__init__.py": "",
        "/opt/stand-in/site/sglang/launch_server.py": _MODULE.format(name="sglang.launch_server"),
    },
    "atom": {
        "/opt/stand-in/site/atom/__init__.py": "",
        "/opt/stand-in/site/atom/entrypoints/__init__.py": "",
        "/opt/stand-in/site/atom/entrypoints/openai_server.py": _MODULE.format(name="atom.entrypoints.openai_server"),
    },
    "trtllm": {
        "/usr/local/bin/mpirun": _SCRIPT.format(name="mpirun"),
        "/usr/local/bin/trtllm-serve": _SCRIPT.format(name="trtllm-serve"),
    },
}
