"""Certificates and keys for the test control plane: one CA, serving and client certificates.

The API server trusts client certificates signed by the CA (``--client-ca-file``): the common
name is the user name and each organisation a group, so :func:`issue_client` makes any user with
any groups (``system:masters`` for the admin). The service-account key pair signs the tokens the
TokenRequest API hands out. Keys are EC P-256: quick to make, accepted by every component.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=2)


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _name(common_name: str, organisations: Sequence[str] = ()) -> x509.Name:
    return x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organisations),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    """A CA kept in ``directory`` (ca.crt, ca.key) that signs serving and client certificates."""

    def __init__(self, directory: Path, common_name: str = "antre-e2e-ca") -> None:
        self.directory = directory
        self._key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        self._name = _name(common_name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(self._name).issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256()))
        self.pair = KeyPair(directory / "ca.crt", directory / "ca.key")
        self.pair.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self._key, self.pair.key)

    def _issue(self, stem: str, subject: x509.Name, usage: x509.ObjectIdentifier,
               hosts: Sequence[str] = ()) -> KeyPair:
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = KeyPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair

    def issue_serving(self, stem: str, hosts: Sequence[str]) -> KeyPair:
        return self._issue(stem, _name(hosts[0]), ExtendedKeyUsageOID.SERVER_AUTH, hosts)

    def issue_client(self, stem: str, user: str, groups: Sequence[str] = ()) -> KeyPair:
        """A client certificate the API server reads as ``user`` in ``groups``."""
        return self._issue(stem, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH)


def write_signing_key(directory: Path, stem: str = "service-account") -> KeyPair:
    """A key pair for service-account tokens: ``cert`` is the public key (what the API server
    verifies tokens with), ``key`` the private one (what it and the token controller sign with).
    """
    key = _new_key()
    pair = KeyPair(directory / f"{stem}.pub", directory / f"{stem}.key")
    pair.cert.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    _write_key(key, pair.key)
    return pair
