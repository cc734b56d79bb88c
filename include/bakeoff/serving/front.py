"""The node's front: TLS and the API-key check for engines bakeoff cannot ask for either (ATOM, TensorRT-LLM).

Why: every cloud endpoint serves the node's pinned certificate and refuses requests without the
run's key (userdata.py). vLLM and SGLang do both themselves; for ATOM's and TensorRT-LLM's servers no
recipe bakeoff draws on sets a key or a certificate, so they listen on loopback only and this small
reverse proxy, run in the agent's stock Python image (pinned by digest), owns the serving port: it
terminates TLS, compares the bearer key in constant time, strips it, and streams the engine's answer
back unbuffered (server-sent events). Standard library only, so it needs no install on the node.
"""

from __future__ import annotations

CONTAINER = "bakeoff-front"

KEY_FILE = "/etc/bakeoff/api_key"
SCRIPT = "/etc/bakeoff/front.py"  # user-data writes SOURCE there; the container reads it read-only
# argv: listen port, engine port on loopback, the key file, then optionally the TLS certificate and key files
SOURCE = """
import hmac, http.client, http.server, ssl, sys
PORT, UP = int(sys.argv[1]), int(sys.argv[2])
KEY = b"Bearer " + open(sys.argv[3], "rb").read().strip()
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "authorization", "upgrade"}
class Front(http.server.BaseHTTPRequestHandler):
    def relay(self):
        if not hmac.compare_digest(self.headers.get("Authorization", "").encode(), KEY):
            self.send_error(401, "missing or wrong API key")
            return
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        up = http.client.HTTPConnection("127.0.0.1", UP, timeout=3600)
        try:
            up.request(self.command, self.path, body, {k: v for k, v in self.headers.items() if k.lower() not in HOP})
            r = up.getresponse()
        except OSError:
            self.send_error(502, "engine not answering")
            return
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        while chunk := r.read1(65536):
            self.wfile.write(chunk)
            self.wfile.flush()
        up.close()
    do_GET = do_POST = do_DELETE = relay
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("0.0.0.0", PORT), Front)
if len(sys.argv) > 5:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(sys.argv[4], sys.argv[5])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""


def program() -> str:
    """SOURCE with one space per indentation level: the same program in fewer user-data bytes."""
    lines = [ln for ln in SOURCE.strip().splitlines() if ln.strip()]
    return "\n".join(" " * ((len(ln) - len(ln.lstrip(" "))) // 4) + ln.lstrip(" ") for ln in lines)


def argv(image: str, port: int, upstream: int, tls: tuple[str, str] | None, tls_dir: str | None) -> list[str]:
    """The ``docker run`` words starting the front (the key file and the TLS folder mounted read-only)."""
    mounts = ["-v", f"{KEY_FILE}:{KEY_FILE}:ro", "-v", f"{SCRIPT}:{SCRIPT}:ro"] + (
        ["-v", f"{tls_dir}:{tls_dir}:ro"] if tls_dir else []
    )
    tail = [str(port), str(upstream), KEY_FILE, *(tls or ())]
    run = ["docker", "run", "-d", "--name", CONTAINER, "--network", "host", "--restart", "no", *mounts, image]
    return [*run, "python", SCRIPT, *tail]
