"""A project-local certificate authority and the Kafka broker's certificate.

Why: the broker listens with TLS even on loopback, so credentials never cross a socket in
clear and clients can verify they talk to *this* broker. ``make up`` (the first start)
creates a CA and a broker certificate for ``127.0.0.1`` / ``localhost`` with the
``cryptography`` package; the CA certificate is what clients trust (``ca.pem``), the
broker key + certificate chain is a PEM keystore Kafka 3.9 reads (``ssl.keystore.type=PEM``).
The CA key stays in the secrets directory (``0600``) to re-issue the broker certificate.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from infra.files import write_private

CA_NAME = "steplens local CA"
BROKER_NAME = "steplens-kafka-broker"
CA_DAYS = 3650
BROKER_DAYS = 825
RENEW_BEFORE = dt.timedelta(days=30)


@dataclass(frozen=True)
class TlsFiles:
    """Where the TLS material lives (all inside the secrets directory)."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        """The CA certificate: the trust anchor clients are given (not secret, but kept together)."""
        return self.directory / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def broker_keystore(self) -> Path:
        """Broker private key (PKCS#8, unencrypted) followed by its certificate and the CA's."""
        return self.directory / "kafka-broker.pem"

    @property
    def broker_principal(self) -> str:
        """The broker's TLS identity as Kafka names it (used for the mutual-TLS controller link)."""
        return f"User:CN={BROKER_NAME}"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _valid_for_a_while(cert: x509.Certificate, now: dt.datetime) -> bool:
    return cert.not_valid_after_utc - now > RENEW_BEFORE


def _load_ca(files: TlsFiles, now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    try:
        cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
        key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    except (OSError, ValueError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not _valid_for_a_while(cert, now):
        return None
    return cert, key


def _new_ca(files: TlsFiles, now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(CA_NAME))
        .issuer_name(_name(CA_NAME))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    write_private(files.ca_key, _pem_key(key))
    write_private(files.ca_cert, cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _broker_ok(files: TlsFiles, ca: x509.Certificate, now: dt.datetime) -> bool:
    try:
        certs = x509.load_pem_x509_certificates(files.broker_keystore.read_bytes())
    except (OSError, ValueError):
        return False
    return bool(certs) and certs[0].issuer == ca.subject and _valid_for_a_while(certs[0], now)


def _new_broker_cert(files: TlsFiles, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
                     now: dt.datetime) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName([
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ])
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(BROKER_NAME))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=BROKER_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(san, critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = _pem_key(key) + cert.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM)
    write_private(files.broker_keystore, pem)


def ensure_tls(directory: Path, now: dt.datetime | None = None) -> TlsFiles:
    """Create the CA and the broker certificate when missing or about to expire; idempotent."""
    files = TlsFiles(Path(directory))
    now = now or dt.datetime.now(dt.UTC)
    loaded = _load_ca(files, now)
    ca, ca_key = loaded if loaded is not None else _new_ca(files, now)
    if loaded is None or not _broker_ok(files, ca, now):
        _new_broker_cert(files, ca, ca_key, now)
    return files
