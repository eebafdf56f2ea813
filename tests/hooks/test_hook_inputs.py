"""Where the spec comes from, and members whose connection cannot be used (no simulator needed)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from airflow_provider_fedsched.federation.spec import SpecError
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.kube.access import ClusterAccessError
from airflow_provider_fedsched.state import FederationState, MemoryStateBackend

SPEC = {
    "name": "inputs",
    "clusters": [{"name": "tls", "conn_id": "k8s_tls", "region": "r1"}],
    "policy": {"snapshot_ttl_seconds": 30},
}


def test_spec_from_an_airflow_variable(airflow_db: None) -> None:
    from airflow.models import Variable

    Variable.set("fedsched_federation", yaml.safe_dump(SPEC))
    assert FederationHook("variable:fedsched_federation").spec.name == "inputs"
    with pytest.raises(SpecError, match="Airflow Variable 'nope' does not exist"):
        FederationHook("variable:nope").spec  # noqa: B018


def test_spec_from_the_provider_config_option(
    airflow_db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "fed.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    monkeypatch.setenv("AIRFLOW__FEDSCHED__FEDERATION_SPEC", str(path))
    assert FederationHook().spec.clusters[0].name == "tls"
    monkeypatch.setenv("AIRFLOW__FEDSCHED__FEDERATION_SPEC", "")
    with pytest.raises(SpecError, match=r"set \[fedsched\] federation_spec"):
        FederationHook().spec  # noqa: B018


def test_missing_connection_is_unavailable_naming_cluster_and_connection(airflow_db: None) -> None:
    hook = FederationHook(SPEC, state=FederationState(MemoryStateBackend()))
    with pytest.raises(
        ClusterAccessError, match="cluster 'tls' \\(connection 'k8s_tls'\\): connection does not"
    ):
        hook.access("tls")
    snapshot = hook.collect()["tls"]
    assert not snapshot.reachable and snapshot.reason == "connection does not exist (connection 'k8s_tls')"


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.fixture
def https_api(tmp_path: Path) -> Iterator[str]:
    """An HTTPS endpoint with a self-signed certificate that nothing trusts."""
    cert, key = _self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    port: list[int] = []

    async def empty_list(request: web.Request) -> web.Response:
        return web.json_response({"items": []})

    async def serve() -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/{tail:.*}", empty_list)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        return runner

    def run() -> None:
        asyncio.set_event_loop(loop)
        runner = loop.run_until_complete(serve())
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    yield f"https://127.0.0.1:{port[0]}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_tls_verification_stays_on_and_a_failure_names_the_cluster(
    https_api: str, monkeypatch: pytest.MonkeyPatch, airflow_db: None
) -> None:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "tls", "cluster": {"server": https_api}}],
        "users": [{"name": "u", "user": {"token": "secret-token-123"}}],
        "contexts": [{"name": "tls", "context": {"cluster": "tls", "user": "u"}}],
        "current-context": "tls",
    }
    connection = {"conn_type": "kubernetes", "extra": {"kube_config": json.dumps(kubeconfig)}}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_TLS", json.dumps(connection))
    hook = FederationHook(SPEC, state=FederationState(MemoryStateBackend()))

    snapshot = hook.collect()["tls"]

    assert not snapshot.reachable
    assert snapshot.reason == f"TLS verification failed for {https_api} (connection 'k8s_tls')"
    assert "secret-token-123" not in snapshot.reason
