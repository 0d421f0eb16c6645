"""TLS for the stack's ports: gRPC over TLS and MCP over HTTPS when certificates are configured.

A service with `tls_cert_file` + `tls_key_file` serves gRPC with `grpc.ssl_server_credentials`
and its /mcp over HTTPS; a client with `tls_ca_file` opens `grpc.aio.secure_channel`s that
verify the server's certificate against that CA (the target's host must be in the
certificate's subject alternative names). Without them everything is plaintext, which is for
the 127.0.0.1 development stack only.

`make_local_ca` creates a private CA and one server certificate per service (for `nucleus up`
with NUCLEUS_TLS=1, and tests); production mounts certificates from its own CA (deploy/).
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from shared.errors import InvalidArgument


def _read(path: Path, field: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise InvalidArgument(field, f"cannot read {path}: {err.strerror}") from None


def server_credentials(cert_file: Path, key_file: Path) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials([(_read(key_file, "tls_key_file"), _read(cert_file, "tls_cert_file"))])


def channel_credentials(ca_file: Path) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(root_certificates=_read(ca_file, "tls_ca_file"))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))


def make_local_ca(directory: Path, names: tuple[str, ...], hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
                  *, days: int = 365) -> Path:
    """A CA (`ca.pem`) and, per name, `<name>.pem` + `<name>.key` valid for `hosts`. Existing
    files are kept (idempotent). Returns the CA certificate's path."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca_cert_path, ca_key_path = directory / "ca.pem", directory / "ca.key"
    now = dt.datetime.now(dt.timezone.utc)
    if ca_cert_path.exists() and ca_key_path.exists():
        ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
        ca_cert = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = (x509.CertificateBuilder().subject_name(_name("nucleus-rag local CA"))
                   .issuer_name(_name("nucleus-rag local CA")).public_key(ca_key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
                   .not_valid_after(now + dt.timedelta(days=days))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .sign(ca_key, hashes.SHA256()))
        _write_key(ca_key_path, ca_key)
        ca_cert_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    for name in names:
        cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
        if cert_path.exists() and key_path.exists():
            continue
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca_cert.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .sign(ca_key, hashes.SHA256()))
        _write_key(key_path, key)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return ca_cert_path


__all__ = ["channel_credentials", "make_local_ca", "server_credentials"]
