"""The soak's REST reads outlast an API server that answers 5xx for a while (its DB pool timed out)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from soak.deployment import Api


class Flaky(BaseHTTPRequestHandler):
    failures_left = 0
    calls = 0

    def do_GET(self) -> None:
        type(self).calls += 1
        if type(self).failures_left > 0:
            type(self).failures_left -= 1
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"detail": "Database error"}')
            return
        body = json.dumps({"state": "running"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


def test_a_read_is_asked_again_while_the_server_answers_500(server: str) -> None:
    Flaky.failures_left, Flaky.calls = 2, 0
    status, body = Api(server).get("/x", patience=30)
    assert (status, body) == (200, {"state": "running"})
    assert Flaky.calls == 3


def test_a_read_gives_up_after_its_patience(server: str) -> None:
    Flaky.failures_left, Flaky.calls = 10**6, 0
    status, _ = Api(server).get("/x", patience=0)
    assert status == 500
    assert Flaky.calls == 1


def test_a_log_line_carries_the_exception_of_a_failed_try() -> None:
    from soak.deployment import _log_line

    line = {
        "level": "error",
        "event": "Task failed with exception",
        "error_detail": [
            {"exc_type": "FederationError", "exc_value": "no cluster could take the task within 60s: x\nmore"}
        ],
    }
    assert _log_line(line) == (
        "ERROR Task failed with exception | FederationError: no cluster could take the task within 60s: x"
    )
    assert _log_line({"level": "info", "event": "hello"}) == "INFO hello"
    stamped = {"timestamp": "2026-12-05T10:28:41.101Z", "level": "info", "event": "hello"}
    assert _log_line(stamped) == "2026-12-05T10:28:41.101Z INFO hello"
    assert _log_line("plain") == "plain"
