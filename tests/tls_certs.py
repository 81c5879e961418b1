"""A certificate authority and certificates made for a test run (with ``cryptography``): a broker's PEM key
store (private key and chain in one file, as KIP-651's ``ssl.keystore.location`` takes it), clients' certificates
for mutual TLS, and an encrypted private key."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(**parts: str) -> x509.Name:
    oids = {"C": NameOID.COUNTRY_NAME, "O": NameOID.ORGANIZATION_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
            "CN": NameOID.COMMON_NAME}
    return x509.Name([x509.NameAttribute(oids[key], value) for key, value in parts.items()])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


@dataclass
class Issued:
    """A key and certificate signed by the test CA, and the PEM files written for them."""

    key_pem: bytes
    cert_pem: bytes
    #: Private key then certificate chain (leaf, CA): a PEM key store.
    keystore: Path
    cert_path: Path
    key_path: Path


class TestCA:
    """A self-signed CA in ``directory``; :meth:`issue` signs server and client certificates."""

    __test__ = False  # not a pytest class

    def __init__(self, directory: Path, name: str = "idemcore test CA") -> None:
        self.directory = directory
        self.key = _key()
        now = datetime.datetime.now(datetime.UTC)
        subject = _name(O="idemcore tests", CN=name)
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=2))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.cert_pem = self.cert.public_bytes(serialization.Encoding.PEM)
        self.path = directory / f"{name.replace(' ', '-')}.pem"
        self.path.write_bytes(self.cert_pem)

    def issue(self, stem: str, *, server: bool = False, password: str | None = None, **subject: str) -> Issued:
        """A certificate for ``subject`` (C, O, OU, CN; server certificates name 127.0.0.1 and localhost)."""
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(_name(**subject)).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1)))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                                   ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        else:
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        key_pem, cert_pem = _pem_key(key, password), cert.public_bytes(serialization.Encoding.PEM)
        keystore = self.directory / f"{stem}.keystore.pem"
        keystore.write_bytes(key_pem + cert_pem + self.cert_pem)
        cert_path, key_path = self.directory / f"{stem}.cert.pem", self.directory / f"{stem}.key.pem"
        cert_path.write_bytes(cert_pem + self.cert_pem)
        key_path.write_bytes(key_pem)
        return Issued(key_pem, cert_pem, keystore, cert_path, key_path)
