"""Make a CA and certificates for a Dask cluster with TLS (mutual authentication).

Writes, into ``--out`` (default ``./tls``)::

    ca.pem, ca-key.pem                     the certificate authority
    scheduler.pem, scheduler-key.pem       one certificate per role,
    worker.pem, worker-key.pem             signed by the CA
    client.pem, client-key.pem

matching the paths of ``deploy/tls/dask-tls.yaml`` once copied to
``/etc/dask/tls/``.  Private keys are written with mode 0600; keep
``ca-key.pem`` off the cluster.  Needs the ``cryptography`` package.

Usage::

    python deploy/tls/make_certs.py --out tls --hosts scheduler.example.org 10.0.0.5
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

#: The roles of distributed's TLS configuration.
ROLES = ("scheduler", "worker", "client")


def _write(path: Path, data: bytes, private: bool = False) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = os.open(path, flags, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _names(hosts: Sequence[str]) -> list:
    from cryptography import x509

    out: list = []
    for host in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            out.append(x509.DNSName(host))
    return out


def make_certs(out: str | os.PathLike[str], hosts: Sequence[str] = ("localhost", "127.0.0.1"),
               days: int = 365) -> dict[str, Path]:
    """Create the CA and the role certificates in ``out``; returns their paths.

    Parameters
    ----------
    out : path-like
        Directory to create (or reuse).
    hosts : sequence of str
        DNS names and IP addresses put in the certificates' subject
        alternative names.
    days : int
        Validity of the certificates.

    Returns
    -------
    dict
        ``{"ca": ca.pem, "scheduler": scheduler.pem, "scheduler-key": ..., ...}``.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    until = now + dt.timedelta(days=days)

    def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "daskdepth cluster CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    paths = {"ca": directory / "ca.pem", "ca-key": directory / "ca-key.pem"}
    _write(paths["ca"], ca_cert.public_bytes(serialization.Encoding.PEM))
    _write(paths["ca-key"], key_pem(ca_key), private=True)

    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"dask-{role}")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
            # Every role both accepts and opens connections.
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        paths[role] = directory / f"{role}.pem"
        paths[f"{role}-key"] = directory / f"{role}-key.pem"
        _write(paths[role], cert.public_bytes(serialization.Encoding.PEM))
        _write(paths[f"{role}-key"], key_pem(key), private=True)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tls", help="output directory (default: ./tls)")
    parser.add_argument("--hosts", nargs="+", default=["localhost", "127.0.0.1"],
                        help="DNS names and IP addresses of the cluster's machines")
    parser.add_argument("--days", type=int, default=365, help="validity in days")
    args = parser.parse_args(argv)
    for role, path in make_certs(args.out, args.hosts, args.days).items():
        print(f"{role:14s} {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
