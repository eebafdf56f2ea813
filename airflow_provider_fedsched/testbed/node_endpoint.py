"""The nodes' kubelet endpoint: container logs served as a kubelet serves them, the rest passed to kwok.

The API server reaches a node's kubelet at the port the node reports (``--node-port``) for ``pods/log``
and ``pods/exec``. kwok serves both, but it asks no container runtime whether a followed container still
runs (its stub answers "unavailable", which its log reader takes for "running"): a follow never ends on
its own, and the only way to end it is an error that lands in the stream. So this endpoint, in front of
kwok, answers ``/containerLogs/...`` itself from the pod agent's buffers (the simulator's kubelet semantics:
:func:`~airflow_provider_fedsched.sim.apiserver.logs.follow_log`, ending cleanly when the container ends,
however long it ran) and splices every other request to kwok unchanged, but for one thing: an exec of
``/bin/sh`` runs the agent's container shell, which shows the pod's directory at the container's
``/airflow/xcom`` (the XCom sidecar's path) without anything written outside the test bed's state dir.

TLS with the kwok serving certificate (the API server checks it against the cluster's CA); the API server
must present a client certificate of that CA, as a kubelet with ``--client-ca-file`` requires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from multidict import MultiDict

from airflow_provider_fedsched.sim.apiserver.logs import LogOptions, follow_log, log_body, waiting_to_start
from airflow_provider_fedsched.sim.apiserver.nodeagent import LogBuffer
from airflow_provider_fedsched.sim.util import ApiError

log = logging.getLogger(__name__)
MAX_HEAD_BYTES = 64 * 1024
SPLICE_CHUNK = 64 * 1024
HEAD_TIMEOUT = 30.0


class Containers(Protocol):
    """What the endpoint asks of the pod agent, on the endpoint's event loop."""

    def output(self, namespace: str, pod: str, container: str) -> LogBuffer | None:
        """The container's output (None before it started); :class:`ApiError` for a pod not here."""
        ...

    def state(self, namespace: str, pod: str, container: str) -> dict[str, Any] | None:
        """The container's last known state (``waiting``, ``running``, ``terminated``)."""
        ...


class NodeEndpoint:
    """Listens on ``127.0.0.1:port`` (TLS) for the API server; kwok listens on ``kwok_port``."""

    def __init__(
        self,
        containers: Containers,
        *,
        port: int,
        kwok_port: int,
        cert: Path,
        key: Path,
        client_ca: Path,
        container_shell: Path,
    ) -> None:
        self.containers = containers
        self.port, self.kwok_port = port, kwok_port
        self.container_shell = container_shell
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(client_ca))
        self._tls.load_cert_chain(str(cert), str(key))
        self._tls.verify_mode = ssl.CERT_REQUIRED
        self.loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(
            target=self.loop.run_forever, name=f"node-endpoint-{port}", daemon=True
        )

    def start(self) -> NodeEndpoint:
        self._thread.start()
        self.call(self._listen).result(timeout=30)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self.call(self._close).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)

    def call(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` (a coroutine function or a plain one) on the endpoint's loop."""

        async def run() -> Any:
            result = fn(*args)
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self.loop)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", self.port, ssl=self._tls, limit=MAX_HEAD_BYTES
        )

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        others = [task for task in asyncio.all_tasks(self.loop) if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    # -- one connection: one request ----------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
            method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            url = urlsplit(target)
            if method == "GET" and url.path.startswith("/containerLogs/"):
                await self._logs(url.path, url.query, writer)
            else:
                await self._to_kwok(_exec_shell(head, url, self.container_shell), reader, writer)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            pass  # not a request this endpoint can read: the connection just ends
        except (ConnectionError, ssl.SSLError):
            pass  # the API server went away (the client stopped following)
        except asyncio.CancelledError:
            pass  # the endpoint stops: the connection ends with it (asyncio's server would log a cancel)
        except Exception as exc:  # never a dead endpoint thread: log and end this connection only
            log.warning("test bed node endpoint: %s", exc)
        finally:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                writer.close()
                await writer.wait_closed()

    async def _logs(self, path: str, query: str, writer: asyncio.StreamWriter) -> None:
        parts = [unquote(p) for p in path.split("/")[2:]]
        if len(parts) != 3 or not all(parts):
            await _respond(writer, 400, b"a container log path is /containerLogs/NAMESPACE/POD/CONTAINER")
            return
        namespace, pod, container = parts
        try:
            options = LogOptions.from_query(MultiDict(parse_qsl(query, keep_blank_values=True)))
            if options.previous:
                raise ApiError(400, f'previous terminated container "{container}" in pod "{pod}" not found')
            buffer = self.containers.output(namespace, pod, container)
            if buffer is None:
                raise waiting_to_start(container, pod, self.containers.state(namespace, pod, container))
        except ApiError as exc:
            await _respond(writer, exc.code, exc.message.encode())
            return
        if not options.follow:
            await _respond(writer, 200, log_body(buffer, options))
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n"
        )

        async def chunk(data: bytes) -> None:
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()

        await follow_log(buffer, options, chunk, lambda: False)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _to_kwok(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        kwok_reader, kwok_writer = await asyncio.open_connection("127.0.0.1", self.kwok_port)
        kwok_writer.write(_closing(head))
        await kwok_writer.drain()
        try:
            await asyncio.gather(_splice(reader, kwok_writer), _splice(kwok_reader, writer))
        finally:
            kwok_writer.close()


def _closing(head: bytes) -> bytes:
    """One request per connection: the API server may keep a connection for its next request, which
    must come to this endpoint again (it may be a log read). An upgrade (exec) keeps its own headers."""
    lines = head.rstrip(b"\r\n").split(b"\r\n")
    if any(line.lower().startswith(b"upgrade:") for line in lines[1:]):
        return head
    kept = [line for line in lines if not line.lower().startswith(b"connection:")]
    return b"\r\n".join([*kept, b"Connection: close"]) + b"\r\n\r\n"


def _exec_shell(head: bytes, url: Any, container_shell: Path) -> bytes:
    """An exec of ``/bin/sh`` runs the container shell instead (see the module's docstring)."""
    if not url.path.startswith("/exec/"):
        return head
    query = parse_qsl(url.query, keep_blank_values=True)
    if ("command", "/bin/sh") not in query:
        return head
    rewritten = [(k, str(container_shell) if (k, v) == ("command", "/bin/sh") else v) for k, v in query]
    target = url.path + "?" + "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in rewritten)
    first, rest = head.split(b"\r\n", 1)
    method, _, version = first.decode("latin-1").split(" ", 2)
    return f"{method} {target} {version}".encode("latin-1") + b"\r\n" + rest


async def _splice(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(SPLICE_CHUNK):
            sink.write(data)
            await sink.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(Exception):
            if sink.can_write_eof():
                sink.write_eof()
            else:
                sink.close()


async def _respond(writer: asyncio.StreamWriter, code: int, body: bytes) -> None:
    reason = ApiError.REASONS.get(code, "Error")
    writer.write(
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()
