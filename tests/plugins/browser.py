"""Headless Debian Chromium driven over the DevTools protocol: set the Airflow auth cookie, load a page,
wait until it says it has loaded, read its text and take a screenshot.

``websocket-client`` comes with the ``kubernetes`` dependency, so no browser-automation package is needed.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
]


def ensure_chromium() -> str | None:
    """The chromium binary, installing Debian's package when missing (idempotent); None if impossible."""
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
        if subprocess.run(command, env=env, capture_output=True, timeout=600).returncode != 0:
            return None
    return shutil.which("chromium")


class Browser:
    """One headless Chromium with one page, for the length of a ``with`` block."""

    def __init__(self, binary: str, width: int = 1400, height: int = 900) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="fedsched-chromium-"))
        self.process = subprocess.Popen(
            [
                binary,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._ids = itertools.count(1)
        self.socket = self._connect()
        self.width, self.height = width, height
        self.call("Page.enable")
        self.call("Network.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _connect(self) -> Any:
        import websocket

        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            pages = [t for t in json.load(response) if t["type"] == "page"]
        return websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        message_id = next(self._ids)
        self.socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def set_cookie(self, url: str, name: str, value: str) -> None:
        self.call("Network.setCookie", url=url, name=name, value=value, path="/")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def open(
        self,
        url: str,
        ready: str = "document.body && document.body.dataset.loaded === 'true'",
        timeout: float = 60,
    ) -> None:
        """Navigate and wait until ``ready`` (a JS expression) is true."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not self.evaluate(
            f"(() => {{ try {{ return Boolean({ready}); }} catch (e) {{ return false; }} }})()"
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: page did not become ready ({ready})")
            time.sleep(0.2)

    def text(self) -> str:
        return str(self.evaluate("document.body.innerText"))

    def screenshot(self, path: Path, full_page: bool = True) -> None:
        height = self.height
        if full_page:
            height = max(self.height, int(self.evaluate("document.documentElement.scrollHeight") or 0))
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def close(self) -> None:
        try:
            self.socket.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
