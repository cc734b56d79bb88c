"""A local SMTP server that keeps what it receives: enough of RFC 5321 for smtplib and the SMTP provider."""

from __future__ import annotations

import json
import socketserver
import threading
from email import message_from_bytes
from email.message import Message


class SmtpSink:
    """Listens on 127.0.0.1; ``messages`` holds (envelope recipients, parsed message) per mail."""

    def __init__(self):
        sink = self
        self.messages: list[tuple[list[str], Message]] = []

        class Session(socketserver.StreamRequestHandler):
            def reply(self, line: str) -> None:
                self.wfile.write(line.encode() + b"\r\n")

            def handle(self) -> None:
                self.reply("220 sink ESMTP")
                rcpt: list[str] = []
                while line := self.rfile.readline():
                    verb = line.decode(errors="replace").strip().split(" ", 1)[0].upper()
                    if verb in ("EHLO", "HELO"):
                        self.reply("250 sink")
                    elif verb == "MAIL":
                        rcpt = []
                        self.reply("250 OK")
                    elif verb == "RCPT":
                        rcpt.append(line.decode().split(":", 1)[1].strip().strip("<>"))
                        self.reply("250 OK")
                    elif verb == "DATA":
                        self.reply("354 end with .")
                        data = b""
                        while (chunk := self.rfile.readline()) not in (b".\r\n", b""):
                            data += chunk[1:] if chunk.startswith(b"..") else chunk
                        sink.messages.append((rcpt, message_from_bytes(data)))
                        self.reply("250 queued")
                    elif verb == "QUIT":
                        self.reply("221 bye")
                        return
                    else:
                        self.reply("250 OK")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Session)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def connection_env(self, conn_id: str = "smtp_default") -> dict[str, str]:
        """An Airflow connection to this sink, as the environment variable Airflow reads."""
        conn = {
            "conn_type": "smtp",
            "host": "127.0.0.1",
            "port": self.port,
            "extra": {"disable_tls": True, "disable_ssl": True, "retry_limit": 0, "timeout": 10},
        }
        return {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(conn)}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> SmtpSink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
