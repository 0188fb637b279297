"""The client over HTTPS: a private CA bundle (`verify=`) and a client
certificate (`cert=`) against a gateway that serves TLS and requires
client certificates. Runs only when the gateway binary serves TLS
(`serve --tls-cert`); the certificates are made with openssl."""

from __future__ import annotations

import asyncio
import shutil
import ssl
from pathlib import Path

import pytest

from lockgate import AsyncGateway, Gateway, GatewayUnavailable
from servers import gateway_serves_tls, make_certificates

pytestmark = [
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make the certificates"),
    pytest.mark.skipif(not gateway_serves_tls(), reason="the gateway binary has no `serve --tls-cert`"),
]


@pytest.fixture
def tls_stack(make_stack, tmp_path: Path):
    certs = make_certificates(tmp_path / "certs")
    _, gateway = make_stack(
        None,
        "--tls-cert", str(certs["server"]),
        "--tls-key", str(certs["server_key"]),
        "--tls-client-ca", str(certs["ca"]),
    )
    return gateway, certs


def test_a_lock_over_tls_with_a_ca_bundle_and_a_client_certificate(tls_stack, key: str) -> None:
    gateway, certs = tls_stack
    assert gateway.url.startswith("https://")
    with Gateway(gateway.url, verify=str(certs["ca"]), cert=(str(certs["client"]), str(certs["client_key"]))) as gw:
        with gw.lock(key, ttl=3) as lock:
            assert lock.fencing_token and lock.fencing_token > 0
            info = gw.inspect(key)
            assert info is not None and info.fencing_token == lock.fencing_token
        assert gw.inspect(key) is None


def test_an_ssl_context_works_as_well_asyncio(tls_stack, key: str) -> None:
    gateway, certs = tls_stack
    context = ssl.create_default_context(cafile=str(certs["ca"]))
    context.load_cert_chain(str(certs["client"]), str(certs["client_key"]))

    async def main() -> None:
        async with AsyncGateway(gateway.url, verify=context) as gw:
            async with gw.lock_all([f"{key}:a", f"{key}:b"], ttl=3) as locks:
                assert len(locks.fencing_tokens) == 2

    asyncio.run(main())


def test_an_unknown_ca_or_a_missing_client_certificate_is_refused(tls_stack, key: str) -> None:
    gateway, certs = tls_stack
    with Gateway(gateway.url, retries=0, cert=(str(certs["client"]), str(certs["client_key"]))) as gw:
        with pytest.raises(GatewayUnavailable):
            gw.acquire(key)  # the server's certificate is from a CA not trusted
    with Gateway(gateway.url, retries=0, verify=str(certs["ca"])) as gw:
        with pytest.raises(GatewayUnavailable):
            gw.acquire(key)  # refused in the handshake: no client certificate
